import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer } from "node:http";
import { connect } from "@nats-io/transport-node";
import { createNetworkTopology, networkNamespacesAvailable, type NetworkTopology } from "../../src/testing/netns.js";
import { startNatsServersIn, type TopologyNatsServer } from "../../src/testing/nats-in-topology.js";

const available = await networkNamespacesAvailable();
if (!available.ok) console.warn(`netns tests skipped: ${available.why}`);

/** Runs a one-line node script inside `host`: its stdout, trimmed (the script prints one word). */
function inside(topology: NetworkTopology, host: string, script: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = topology.spawn(host, process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    child.on("exit", () => resolve(out.trim()));
    child.on("error", reject);
  });
}

/** A script that prints "open" when `host:port` accepts a TCP connection within 1.5 s, else "closed". */
const probe = (host: string, port: number) =>
  `const s=require("node:net").connect(${port},"${host}");const t=setTimeout(()=>{console.log("closed");process.exit(0)},1500);` +
  `s.on("connect",()=>{console.log("open");process.exit(0)});s.on("error",()=>{clearTimeout(t);console.log("closed");process.exit(0)})`;

describe.skipIf(!available.ok)("network namespaces (test harness)", () => {
  let topology: NetworkTopology;
  let servers: TopologyNatsServer[];
  beforeAll(async () => {
    topology = await createNetworkTopology({ hosts: ["s1", "s2", "n1", "n2"] });
    servers = await startNatsServersIn(topology, ["s1", "s2"]);
  }, 60_000);
  afterAll(async () => {
    await Promise.all((servers ?? []).map((s) => s.stop()));
    await topology?.dispose();
  });

  it("netns - hosts reach each other inside, this process reaches in through forward and out through expose; cut and block drop traffic until healed", async () => {
    expect(topology.address("n1")).toMatch(/^10\.77\.0\.\d+$/);
    // nats-servers inside, a client here through the relay: a message goes round.
    const nc = await connect({ servers: servers.map((s) => s.url) });
    const sub = nc.subscribe("netns.ping", { max: 1 });
    await nc.flush();
    nc.publish("netns.ping", "hi");
    for await (const m of sub) expect(m.string()).toBe("hi");
    await nc.close();

    const s1 = topology.address("s1");
    expect(await inside(topology, "n1", probe(s1, 4222))).toBe("open");
    await topology.cut("n1");
    expect(await inside(topology, "n1", probe(s1, 4222))).toBe("closed");
    expect(await inside(topology, "n2", probe(s1, 4222))).toBe("open");
    await topology.heal("n1");
    expect(await inside(topology, "n1", probe(s1, 4222))).toBe("open");

    await topology.block("n2", "s1");
    expect(await inside(topology, "n2", probe(s1, 4222))).toBe("closed");
    expect(await inside(topology, "n2", probe(topology.address("s2"), 4222))).toBe("open");
    await topology.unblock("n2", "s1");
    expect(await inside(topology, "n2", probe(s1, 4222))).toBe("open");

    // A service of this process (a scripted model server would be one) is reachable inside.
    const http = createServer((_req, res) => res.end("from outside"));
    await new Promise<void>((r) => http.listen(0, "127.0.0.1", () => r()));
    const port = (http.address() as { port: number }).port;
    const exposed = await topology.expose(port);
    const got = await inside(
      topology,
      "n2",
      `fetch("http://${exposed.host}:${exposed.port}/").then(r=>r.text()).then(t=>console.log(t.replace(" ","-")),e=>console.log("failed:"+e))`,
    );
    expect(got).toBe("from-outside");
    http.close();
  }, 60_000);
});
