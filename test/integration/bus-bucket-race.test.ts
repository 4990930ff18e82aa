import { describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { randomUUID } from "node:crypto";
import { Bus, openOrCreateBucket } from "../../src/bus/index.js";
import { startNatsServer } from "../../src/testing/index.js";
import { disposeAll } from "../fixtures/disposable.js";

const ROUNDS = 40;
const CREATORS = 6;

async function race(create: (nc: NatsConnection, name: string) => Promise<unknown>): Promise<string[]> {
  await using srv = await startNatsServer({ allowExternal: false });
  await using conns = disposeAll(await Promise.all(Array.from({ length: CREATORS }, () => connect({ servers: srv.url }))));
  const errors: string[] = [];
  // Every round, all creators open the same new bucket at once, as nodes that start together do.
  await Promise.all(
    Array.from({ length: ROUNDS }, async (_, i) => {
      const r = await Promise.allSettled(conns.map((nc) => create(nc, `race${i}`)));
      for (const x of r) if (x.status === "rejected") errors.push(String(x.reason));
    }),
  );
  return errors;
}

describe("bucket creation races", () => {
  it("kv - nodes creating the same buckets at once all open them (a lost creation race is retried)", async () => {
    const errors = await race((nc, name) => openOrCreateBucket(nc, name, { history: 1, storage: "file" }));
    expect(errors).toEqual([]);
  }, 120_000);

  it("streams - nodes ensuring Kova's streams at once all start", async () => {
    await using srv = await startNatsServer({ allowExternal: false });
    const cluster = `r${randomUUID().slice(0, 8)}`;
    await using buses = disposeAll(await Promise.all(Array.from({ length: CREATORS }, () => Bus.connect({ servers: srv.url, cluster }))));
    const r = await Promise.allSettled(buses.map((b) => b.ensureStreams()));
    expect(r.filter((x) => x.status === "rejected").map((x) => String((x as PromiseRejectedResult).reason))).toEqual([]);
  }, 60_000);
});
