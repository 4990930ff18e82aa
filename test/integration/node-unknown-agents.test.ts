import { randomUUID } from "node:crypto";
import { headers } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { ActorTypeRegistry, counterActor } from "../../src/actors/index.js";
import { Bus, createEnvelope } from "../../src/bus/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { createLogger } from "../../src/core/logger.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import { startNatsServer } from "../../src/testing/index.js";
import { defer, tempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

const WAIT_MS = 1500;

/** A nats-server and one node with `unknown_agent_after_ms` = WAIT_MS, the agent `known` and the tables in `toml`. */
async function nodeWith(toml: string) {
  const server = await startNatsServer({ allowExternal: false });
  const dir = await tempDir("kova-unknown-");
  const cluster = `u${process.pid}`;
  let node: KovaNode | undefined;
  let bus: Bus | undefined;
  const stop = defer(async () => {
    await bus?.close();
    await node?.stop();
    await dir[Symbol.asyncDispose]();
    await server[Symbol.asyncDispose]();
  });
  try {
    const config = parseConfig(
      `[node]\nid = "u1"\ndata_dir = "${dir.path}"\n[cluster]\nname = "${cluster}"\nunknown_agent_after_ms = ${WAIT_MS}\n` +
        `[nats]\nurls = ["${server.url}"]\n[wal]\nsync = "normal"\n[[actors]]\nid = "known"\ntype = "counter"\n${toml}`,
      { env: {} },
    );
    node = await KovaNode.start({ config, logger: createLogger({ level: "silent" }), types: new ActorTypeRegistry([counterActor]) });
    bus = await Bus.connect({ servers: server.url, cluster, logger: createLogger({ level: "silent" }) });
    const started = node;
    await poll(async () => started.agents().some((a) => a.id === "known" && a.state === "Idle"), { timeoutMs: 15_000, what: "known hosted" });
    return { node: started, bus, [Symbol.asyncDispose]: () => stop[Symbol.asyncDispose]() };
  } catch (err) {
    await stop[Symbol.asyncDispose]();
    throw err;
  }
}

describe("messages to agents nobody declared", () => {
  it("unknown agents - a message to an undeclared id goes to the DLQ as unknown_agent after the wait; ask fails at once with UNKNOWN_AGENT", async () => {
    await using n = await nodeWith("");
    const { bus } = n;

    const ghost = createEnvelope({ from: "tester", to: "ghost", type: "task_delegate", payload: { n: 1 } });
    const sentAt = Date.now();
    await bus.send(ghost);
    const dead = await poll(async () => (await bus.listDlq({ reason: "unknown_agent" })).find((d) => d.headers["Kova-Dlq-Msg-Id"] === ghost.id), {
      timeoutMs: 20_000,
      what: "ghost's message in the DLQ",
    });
    // Not before the configured wait, and the body is the whole original.
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(WAIT_MS);
    expect(dead.headers["Kova-Dlq-Error-Code"]).toBe("UNKNOWN_AGENT");
    expect(dead.headers["Kova-Dlq-Agent"]).toBe("ghost");
    const a2a = bus.subjects.streams.a2a;
    const left = await bus.jsm.streams.info(a2a, { subjects_filter: bus.subjects.a2a("ghost") });
    expect(left.state.subjects?.[bus.subjects.a2a("ghost")] ?? 0).toBe(0);

    // ask: no waiting out the timeout for an agent that does not exist.
    const t0 = Date.now();
    const err = await bus
      .ask(createEnvelope({ from: "tester", to: "nobody-here", type: "task_delegate", payload: null }), { timeoutMs: 30_000 })
      .catch((e: unknown) => e);
    expect(isKovaError(err, "UNKNOWN_AGENT")).toBe(true);
    expect((err as Error).message).toContain("kova agents ls");
    expect(Date.now() - t0).toBeLessThan(5_000);
    // A declared agent is asked as before.
    expect((await bus.ask(createEnvelope({ from: "tester", to: "known", type: "task_delegate", payload: null }), { timeoutMs: 10_000 })).type).toBe(
      "result_notify",
    );
  });

  it("unknown agents - raw publishes whose last token is no valid id (bad+id, 200 characters) or names an instance of no template (nosuch--x) go to the DLQ whole as unknown_agent after the wait; an instance of a declared template is activated", async () => {
    await using n = await nodeWith(`[[actor_templates]]\nname = "tally"\ntype = "counter"\n`);
    const { bus, node } = n;
    // What any NATS client may do (the client role publishes to a2a.>): no KovaClient checks.
    const raw = async (token: string) => {
      const subject = `${bus.subjects.prefix}.a2a.${token}`;
      const body = new TextEncoder().encode(JSON.stringify({ id: randomUUID(), from: "raw", to: token, type: "task_delegate", payload: { n: 1 } }));
      const h = headers();
      h.set("Content-Type", "application/json");
      const ack = await bus.js.publish(subject, body, { headers: h });
      expect(ack.stream).toBe(bus.subjects.streams.a2a);
      return { subject, body };
    };
    const sentAt = Date.now();
    const strays = [await raw("bad+id"), await raw("x".repeat(200)), await raw("nosuch--x")];
    const tally = await raw("tally--x");

    const dead = await poll(
      async () => {
        const dlq = await bus.listDlq({ reason: "unknown_agent" });
        const found = strays.map((s) => dlq.find((d) => d.headers["Kova-Dlq-Subject"] === s.subject));
        return found.every((d) => d !== undefined) ? found : undefined;
      },
      { timeoutMs: 20_000, what: "the three strays in the DLQ" },
    );
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(WAIT_MS);
    for (const [i, d] of dead.entries()) {
      expect(d?.headers["Kova-Dlq-Error-Code"]).toBe("UNKNOWN_AGENT");
      expect(Buffer.from(d?.data ?? []).equals(Buffer.from(strays[i]!.body)), `${strays[i]!.subject} kept whole`).toBe(true);
    }
    expect(dead[0]?.headers["Kova-Dlq-Error"]).toContain('"bad+id" (6 characters) is not an agent id');
    expect(dead[2]?.headers["Kova-Dlq-Error"]).toContain("nothing declared agent nosuch--x");
    const left = await bus.jsm.streams.info(bus.subjects.streams.a2a, { subjects_filter: `${bus.subjects.prefix}.a2a.*` });
    for (const s of strays) expect(left.state.subjects?.[s.subject] ?? 0, s.subject).toBe(0);
    // The same sweep activated the instance of the template that exists, and its mailbox took its message.
    await poll(async () => node.agents().some((a) => a.id === "tally--x"), { timeoutMs: 10_000, what: "tally--x hosted" });
    await poll(
      async () => ((await bus.jsm.streams.info(bus.subjects.streams.a2a, { subjects_filter: tally.subject })).state.subjects?.[tally.subject] ?? 0) === 0,
      { timeoutMs: 10_000, what: "tally--x's message consumed" },
    );
  });

  it("unknown agents - ask looks a declared agent up in the registry once per period, an unknown id every time", async () => {
    await using n = await nodeWith("");
    const { bus } = n;
    // Every registry lookup is a direct get on the agents bucket; a plain subscriber sees each request.
    const lookups: string[] = [];
    const watch = bus.nc.subscribe(`$JS.API.DIRECT.GET.KV_${bus.subjects.kv.agents}`, {
      callback: (_err, m) => {
        lookups.push(String(JSON.parse(new TextDecoder().decode(m.data)).last_by_subj));
      },
    });
    const ask = (to: string) => bus.ask(createEnvelope({ from: "tester", to, type: "task_delegate", payload: null }), { timeoutMs: 10_000 });
    for (let i = 0; i < 3; i++) expect((await ask("known")).type).toBe("result_notify");
    for (let i = 0; i < 2; i++) expect(isKovaError(await ask("nobody-here").catch((e: unknown) => e), "UNKNOWN_AGENT")).toBe(true);
    await bus.nc.flush();
    watch.unsubscribe();
    expect(lookups.filter((s) => s.endsWith(".known"))).toHaveLength(1);
    expect(lookups.filter((s) => s.endsWith(".nobody-here"))).toHaveLength(2);
  });
});
