import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { BusErrorCode, listKvKeys, readKvEntries } from "../../src/bus/index.js";
import { ErrorCode, isKovaError } from "../../src/core/errors.js";
import { startNatsServer } from "../../src/testing/index.js";
import { fileServer } from "../fixtures/bus/helpers.js";
import { poll } from "../fixtures/poll.js";

const server = fileServer();
let nc: NatsConnection;
let bucketNo = 0;

beforeAll(async () => {
  nc = await connect({ servers: server.url });
});

afterAll(async () => {
  await nc?.close();
});

async function bucket(history = 1): Promise<{ name: string; kv: KV }> {
  const name = `keys${++bucketNo}`;
  return { name, kv: await new Kvm(nc).create(name, { history }) };
}

/** What a call was rejected with (a call that succeeds gives its result, which no check below accepts). */
const caught = (p: Promise<unknown>) => p.catch((err: unknown) => err);

describe("listKvKeys / readKvEntries: a bucket's live keys from its stream's subjects", () => {
  it("kv keys - lists every live key once, sorted, with its last value; deleted and purged keys are left out", async () => {
    for (const history of [1, 5]) {
      const { name, kv } = await bucket(history);
      await kv.put("b", "1");
      await kv.put("b", "2");
      await kv.put("a", "1");
      await kv.put("gone", "1");
      await kv.delete("gone");
      await kv.put("purged", "1");
      await kv.purge("purged");
      await kv.put("back", "1");
      await kv.delete("back");
      await kv.put("back", "3");
      expect(await listKvKeys(nc, name)).toEqual(["a", "b", "back"]);
      // The same through a JetStreamClient (the workflow stores hold one, not a connection).
      expect(await listKvKeys(jetstream(nc), name)).toEqual(["a", "b", "back"]);
      const entries = await readKvEntries(nc, name);
      expect([...entries].map(([k, e]) => [k, e.string()])).toEqual([
        ["a", "1"],
        ["b", "2"],
        ["back", "3"],
      ]);
    }
  });

  it("kv keys - a filter lists only the keys it matches; a bad filter or bucket name is refused", async () => {
    const { name, kv } = await bucket();
    for (const k of ["a.x", "a.y", "a.y.z", "b.x", "ax"]) await kv.put(k, "v");
    expect(await listKvKeys(nc, name, { filter: "a.*" })).toEqual(["a.x", "a.y"]);
    expect(await listKvKeys(nc, name, { filter: "a.>" })).toEqual(["a.x", "a.y", "a.y.z"]);
    expect(await listKvKeys(nc, name, { filter: "*.x" })).toEqual(["a.x", "b.x"]);
    expect(await listKvKeys(nc, name, { filter: "ax" })).toEqual(["ax"]);
    expect(await listKvKeys(nc, name, { filter: "c.*" })).toEqual([]);
    for (const filter of ["a.>.x", "", "a..b", "a b", "$KV.x"]) {
      const err = await caught(listKvKeys(nc, name, { filter }));
      expect(isKovaError(err, ErrorCode.INVALID_ARGUMENT), `${filter}: ${String(err)}`).toBe(true);
      expect(String(err)).toContain("filter");
    }
    expect(isKovaError(await caught(listKvKeys(nc, "no.such")), ErrorCode.INVALID_ARGUMENT)).toBe(true);
    expect(isKovaError(await caught(listKvKeys(nc, name, { timeoutMs: 0 })), ErrorCode.INVALID_ARGUMENT)).toBe(true);
  });

  it("kv keys - an empty bucket lists nothing, and one emptied by deletes lists nothing", async () => {
    const { name, kv } = await bucket();
    expect(await listKvKeys(nc, name)).toEqual([]);
    await kv.put("k", "v");
    await kv.delete("k");
    expect(await listKvKeys(nc, name)).toEqual([]);
  });

  it("kv keys - a missing bucket is a BUCKET_NOT_FOUND naming it", async () => {
    const err = await caught(listKvKeys(nc, "never_made"));
    expect(isKovaError(err, BusErrorCode.BUCKET_NOT_FOUND), String(err)).toBe(true);
    expect(String(err)).toContain("never_made");
  });

  it("kv keys - more keys than one STREAM.INFO page holds (100,000) are all listed", async () => {
    const { name } = await bucket();
    const n = 100_010;
    // Straight onto the bucket's subjects (what kv.put publishes), without waiting for each ack.
    for (let i = 0; i < n; i++) nc.publish(`$KV.${name}.k${i}`, "v");
    await nc.flush();
    const jsm = await jetstreamManager(nc);
    await poll(async () => (await jsm.streams.info(`KV_${name}`)).state.messages === n, { timeoutMs: 30_000, what: "every key stored" });
    const keys = await listKvKeys(nc, name, { timeoutMs: 60_000 });
    expect(keys.length).toBe(n);
    expect(new Set(keys).size).toBe(n);
    expect(keys).toContain("k0");
    expect(keys).toContain(`k${n - 1}`);
  }, 120_000);

  it("kv keys - a JetStream that does not answer fails the listing with TIMEOUT at the time given", async () => {
    // A server without JetStream, and a responder on the JetStream API that never replies.
    await using mute = await startNatsServer({ allowExternal: false, jetstream: false });
    await using mnc = await connect({ servers: mute.url });
    mnc.subscribe("$JS.API.>", { callback: () => undefined });
    await mnc.flush();
    const started = Date.now();
    const err = await caught(listKvKeys(mnc, "stalled", { timeoutMs: 500 }));
    expect(isKovaError(err, ErrorCode.TIMEOUT), String(err)).toBe(true);
    expect(String(err)).toContain("stalled");
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});
