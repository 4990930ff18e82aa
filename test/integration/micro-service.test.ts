import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, headers, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { startMicroService, type MicroService } from "../../src/cluster/micro-service.js";
import { ConfigError, KovaError } from "../../src/core/errors.js";
import { requestMany, schemaProblems } from "../fixtures/deploy/micro-responses.js";
import { ActorErrorCode } from "../../src/actors/errors.js";
import { isNatsNoResponders } from "../../src/bus/nats-errors.js";
import { defer } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";

let server: NatsServerHandle;
let nc: NatsConnection;
const started: MicroService[] = [];

async function service(conn: NatsConnection, name: string, extra: Partial<Parameters<typeof startMicroService>[1]> = {}) {
  const svc = await startMicroService(conn, {
    name,
    version: "0.1.0",
    description: "a kova node",
    metadata: { node: "n1" },
    endpoints: [
      { name: "status", subject: `${name}.status`, metadata: { kind: "read" }, handler: async () => ({ ok: true }) },
      {
        name: "fail",
        subject: `${name}.fail`,
        handler: async () => {
          throw new KovaError(ActorErrorCode.NOT_HOSTED, "agent a1 is not hosted here", { data: { agent: "a1" } });
        },
      },
    ],
    ...extra,
  });
  started.push(svc);
  return svc;
}

beforeAll(async () => {
  server = await startNatsServer({ allowExternal: false, jetstream: false });
  nc = await connect({ servers: server.url });
});

afterAll(async () => {
  await Promise.all(started.map((s) => s.stop()));
  await nc?.close();
  await server?.stop();
});

describe("micro service", () => {
  it("micro service - every instance answers PING, INFO and STATS at all three levels with valid shapes", async () => {
    const conns = await Promise.all([0, 1, 2].map(() => connect({ servers: server.url })));
    await using _conns = defer(() => Promise.all(conns.map((c) => c.close())));
    const svcs = await Promise.all(conns.map((c) => service(c, "kova-node-a")));
    const ids = new Set(svcs.map((s) => s.id));
    expect(ids.size).toBe(3);
    for (const verb of ["PING", "INFO", "STATS"] as const) {
      const kind = verb.toLowerCase() as "ping" | "info" | "stats";
      const all = (await requestMany(nc, `$SRV.${verb}`, 3)).filter((r) => ids.has(r.id));
      const byName = await requestMany(nc, `$SRV.${verb}.kova-node-a`, 3);
      expect(all.map((r) => r.id).sort()).toEqual([...ids].sort());
      expect(byName.map((r) => r.id).sort()).toEqual([...ids].sort());
      for (const svc of svcs) {
        const one = await requestMany(nc, `$SRV.${verb}.kova-node-a.${svc.id}`, 2, 200);
        expect(one.map((r) => r.id)).toEqual([svc.id]);
      }
      for (const r of [...all, ...byName]) {
        expect(schemaProblems(kind, r)).toEqual([]);
        expect(r.name).toBe("kova-node-a");
        expect(r.metadata).toEqual({ node: "n1" });
      }
    }
    const [info] = await requestMany(nc, `$SRV.INFO.kova-node-a.${svcs[0]!.id}`, 1);
    expect(info.description).toBe("a kova node");
    expect(info.endpoints).toEqual([
      { name: "status", subject: "kova-node-a.status", queue_group: "q", metadata: { kind: "read" } },
      { name: "fail", subject: "kova-node-a.fail", queue_group: "q", metadata: {} },
    ]);
  });

  it("micro service - endpoint results are JSON replies and counted in stats with nanosecond times", async () => {
    const svc = await service(nc, "kova-node-b", {
      queueGroup: "kova",
      endpoints: [
        {
          name: "echo",
          subject: "kova-node-b.echo",
          handler: async (data, h) => {
            await new Promise((r) => setTimeout(r, 20));
            return { got: new TextDecoder().decode(data), header: h?.get("X-Test") ?? null };
          },
        },
      ],
    });
    const h = headers();
    h.set("X-Test", "yes");
    for (let i = 0; i < 3; i++) {
      const reply = await nc.request("kova-node-b.echo", `m${i}`, { timeout: 2_000, headers: h });
      expect(reply.json()).toEqual({ got: `m${i}`, header: "yes" });
    }
    const [stats] = await requestMany(nc, `$SRV.STATS.kova-node-b.${svc.id}`, 1);
    expect(schemaProblems("stats", stats)).toEqual([]);
    const echo = stats.endpoints.find((e: any) => e.name === "echo");
    expect(echo).toMatchObject({ subject: "kova-node-b.echo", queue_group: "kova", num_requests: 3, num_errors: 0, last_error: "" });
    // three handlers of at least 20 ms each, reported in nanoseconds
    expect(echo.processing_time).toBeGreaterThanOrEqual(3 * 19_000_000);
    expect(echo.average_processing_time).toBe(Math.round(echo.processing_time / 3));
    expect(Math.abs(Date.parse(stats.started) - Date.now())).toBeLessThan(60_000);
  });

  it("micro service - a throwing handler replies with Nats-Service-Error headers and counts as an error", async () => {
    const svc = await service(nc, "kova-node-c");
    const reply: Msg = await nc.request("kova-node-c.fail", "", { timeout: 2_000 });
    expect(reply.headers?.get("Nats-Service-Error")).toBe("agent a1 is not hosted here");
    expect(reply.headers?.get("Nats-Service-Error-Code")).toBe("404");
    expect(reply.json()).toEqual({ code: "NOT_HOSTED", message: "agent a1 is not hosted here", retryable: false, data: { agent: "a1" } });
    const plain = await startMicroService(nc, {
      name: "kova-node-c2",
      version: "1.2.3-rc.1",
      endpoints: [
        {
          name: "boom",
          subject: "kova-node-c2.boom",
          handler: async () => {
            throw new Error("boom\nsecond line");
          },
        },
      ],
    });
    started.push(plain);
    const boom = await nc.request("kova-node-c2.boom", "", { timeout: 2_000 });
    expect(boom.headers?.get("Nats-Service-Error-Code")).toBe("500");
    expect(boom.headers?.get("Nats-Service-Error")).toBe("boom second line");
    const unencodable = await startMicroService(nc, {
      name: "kova-node-c3",
      version: "1.0.0",
      endpoints: [{ name: "big", subject: "kova-node-c3.big", handler: async () => ({ n: 1n }) }],
    });
    started.push(unencodable);
    const big = await nc.request("kova-node-c3.big", "", { timeout: 2_000 });
    expect(big.headers?.get("Nats-Service-Error-Code")).toBe("500");
    expect(big.json<{ code: string }>().code).toBe("INTERNAL");
    await nc.request("kova-node-c.status", "", { timeout: 2_000 });
    const [stats] = await requestMany(nc, `$SRV.STATS.kova-node-c.${svc.id}`, 1);
    expect(schemaProblems("stats", stats)).toEqual([]);
    const byName = Object.fromEntries(stats.endpoints.map((e: any) => [e.name, e]));
    expect(byName.fail).toMatchObject({ num_requests: 1, num_errors: 1, last_error: "404:agent a1 is not hosted here" });
    expect(byName.status).toMatchObject({ num_requests: 1, num_errors: 0, last_error: "" });
  });

  it("micro service - stop waits for in-flight requests and then no longer answers", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const handling = new Promise<void>((r) => (entered = r));
    const svc = await service(nc, "kova-node-d", {
      endpoints: [
        {
          name: "slow",
          subject: "kova-node-d.slow",
          handler: async () => {
            entered();
            await gate;
            return "done";
          },
        },
      ],
    });
    const pending = nc.request("kova-node-d.slow", "", { timeout: 5_000 });
    await handling;
    let stopDone = false;
    const stopping = svc.stop().then(() => (stopDone = true));
    // The subscriptions are drained (the server reports no responders) while the handler
    // still runs: stop has done all it can and waits for the request in flight.
    await poll(() => nc.request(`$SRV.PING.kova-node-d.${svc.id}`, "", { timeout: 1_000 }).then(() => false, isNatsNoResponders), {
      timeoutMs: 5_000,
      what: "the service's subscriptions to be drained",
    });
    expect(stopDone).toBe(false);
    release();
    expect((await pending).json()).toBe("done");
    await stopping;
    expect(isNatsNoResponders(await nc.request("$SRV.PING.kova-node-d", "", { timeout: 1_000 }).catch((e: unknown) => e))).toBe(true);
    expect(isNatsNoResponders(await nc.request("kova-node-d.slow", "", { timeout: 1_000 }).catch((e: unknown) => e))).toBe(true);
    await svc.stop(); // idempotent
  });

  it("micro service - rejects an invalid name, version or endpoint before subscribing", async () => {
    const base = { name: "ok", version: "1.0.0", endpoints: [] };
    await expect(startMicroService(nc, { ...base, name: "kova.node" })).rejects.toBeInstanceOf(ConfigError);
    await expect(startMicroService(nc, { ...base, version: "1.0" })).rejects.toThrow(/service.version/);
    await expect(startMicroService(nc, { ...base, endpoints: [{ name: "x", subject: "a.>.b", handler: async () => 1 }] })).rejects.toThrow(
      /endpoints\[0\]\.subject/,
    );
    await expect(
      startMicroService(nc, {
        ...base,
        endpoints: [
          { name: "x", subject: "a", handler: async () => 1 },
          { name: "x", subject: "b", handler: async () => 1 },
        ],
      }),
    ).rejects.toThrow(/duplicate endpoint/);
    expect(await requestMany(nc, "$SRV.PING.ok", 1, 200)).toEqual([]);
  });
});
