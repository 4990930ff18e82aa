import { connect, headers, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidIdError, KovaError } from "../../src/core/errors.js";
import {
  PayloadTooLargeError,
  createEnvelope,
  decodeEnvelope,
  encodeEnvelope,
  encodeValue,
  type A2AEnvelope,
  type Bus,
  type DlqEntry,
  type MailboxOptions,
} from "../../src/bus/index.js";
import { startNatsServer, type NatsServerHandle } from "../../src/testing/index.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { ActorDlqReason, ActorErrorCode } from "../../src/actors/errors.js";
import { poll } from "../fixtures/poll.js";

let server: NatsServerHandle;
beforeAll(async () => {
  // A small max_payload keeps the oversized case cheap.
  server = await startNatsServer({ allowExternal: false, extraConfig: "max_payload: 65536" });
});
afterAll(async () => {
  await server?.stop();
});

const te = new TextEncoder();
const decodeValueAsJson = (data: Uint8Array) => JSON.parse(new TextDecoder().decode(data)) as unknown;

/** Publishes raw bytes to an agent's inbox the way any NATS client could. */
async function publishRaw(nc: NatsConnection, subject: string, data: Uint8Array, json = false): Promise<void> {
  const h = headers();
  if (json) h.set("Content-Type", "application/json");
  const reply = await nc.request(subject, data, { headers: h, timeout: 5_000 });
  expect(reply.json<{ seq: number }>().seq).toBeGreaterThan(0);
}

async function dlqOf(bus: Bus, reason: string, count = 1): Promise<DlqEntry[]> {
  return poll(
    async () => {
      const entries = await bus.listDlq({ reason });
      return entries.length >= count ? entries : undefined;
    },
    { timeoutMs: 10_000, what: `DLQ entry ${reason}` },
  );
}

/** A mailbox whose handler always fails on the messages `poisoned` picks: delivery counts of those, ids of the rest. */
async function poisonedMailbox(
  bus: Bus,
  agentId: string,
  poisoned: (env: A2AEnvelope) => boolean,
  opts: MailboxOptions,
): Promise<{ attempts: number[]; done: string[] }> {
  const attempts: number[] = [];
  const done: string[] = [];
  await bus.openMailbox(
    agentId,
    async (env, ctx) => {
      if (poisoned(env)) {
        attempts.push(ctx.deliveryCount);
        throw new Error("always fails");
      }
      done.push(env.id);
    },
    opts,
  );
  return { attempts, done };
}

describe("bus DLQ", () => {
  it("dlq - malformed msgpack, invalid JSON, schema-invalid and unknown-type messages go to the DLQ and the next good message is processed", async () => {
    const cluster = uniqueCluster();
    await using bus = await connectBus(server.url, cluster);
    await using nc = await connect({ servers: server.url });
    const inbox = bus.subjects.a2a("victim");
    const malformed = Uint8Array.from([0x93, 0x01, 0xc1, 0xff]);
    const badJson = te.encode('{"id": "x", oops');
    const schemaInvalid = encodeValue({ id: "bad id with spaces", from: "a", to: "victim", type: "task_delegate", payload: 1 });
    const unknownType = encodeValue({ id: "u1", from: "a", to: "victim", type: "launch_missiles", payload: 1 });
    const deep = encodeValue(JSON.parse("[".repeat(200) + "]".repeat(200)));
    await publishRaw(nc, inbox, malformed);
    await publishRaw(nc, inbox, badJson, true);
    await publishRaw(nc, inbox, schemaInvalid);
    await publishRaw(nc, inbox, unknownType);
    await publishRaw(nc, inbox, deep);
    const good = createEnvelope({ from: "a", to: "victim", type: "task_delegate", payload: "good" });
    await bus.send(good);

    const got: A2AEnvelope[] = [];
    await bus.openMailbox("victim", async (env) => void got.push(env));
    await poll(() => got.length === 1, { timeoutMs: 10_000, what: "good message" });
    expect(got[0]!.id).toBe(good.id);

    const [m] = await dlqOf(bus, "malformed_msgpack", 2);
    expect(Buffer.from(m!.data)).toEqual(Buffer.from(deep)); // newest first: the too-deep one
    const all = await bus.listDlq();
    const byReason = (r: string) => all.filter((e) => e.reason === r);
    expect(byReason("malformed_msgpack").map((e) => Buffer.from(e.data))).toContainEqual(Buffer.from(malformed));
    expect(byReason("malformed_msgpack").some((e) => /nesting deeper/.test(e.headers["Kova-Dlq-Error"]!))).toBe(true);
    const json = byReason("invalid_json")[0]!;
    expect(Buffer.from(json.data)).toEqual(Buffer.from(badJson));
    expect(json.headers["Content-Type"]).toBe("application/json");
    expect(json.headers["Kova-Dlq-Error-Code"]).toBe("DECODE_FAILED");
    const invalid = byReason("invalid_envelope")[0]!;
    expect(Buffer.from(invalid.data)).toEqual(Buffer.from(schemaInvalid));
    expect(invalid.headers["Kova-Dlq-Error"]).toContain("id");
    expect(invalid.subject).toBe(bus.subjects.dlq("invalid_envelope"));
    const unknown = byReason("unknown_type")[0]!;
    expect(Buffer.from(unknown.data)).toEqual(Buffer.from(unknownType));
    expect(unknown.headers["Kova-Dlq-Agent"]).toBe("victim");
    expect(unknown.headers["Kova-Dlq-Subject"]).toBe(inbox);
    expect(unknown.headers["Kova-Dlq-Error"]).toContain("launch_missiles");
    // Nothing is left behind in the WorkQueue stream.
    const info = await bus.jsm.streams.info(bus.subjects.streams.a2a);
    expect(info.state.messages).toBe(0);
  });

  it("dlq - a message delivered after its deadline, or addressed to another agent, goes to the DLQ instead of the handler", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    const late = createEnvelope({ from: "a", to: "punctual", type: "task_delegate", payload: "late", deadline: Date.now() + 50 });
    await bus.send(late);
    const nc = await connect({ servers: server.url });
    const misrouted = encodeValue({ id: "m2", from: "a", to: "someone-else", type: "task_delegate", payload: 1 });
    await publishRaw(nc, bus.subjects.a2a("punctual"), misrouted);
    await nc.close();
    await poll(() => Date.now() > late.deadline!, { timeoutMs: 1_000, what: "the late message's deadline to pass" });
    const good = createEnvelope({ from: "a", to: "punctual", type: "task_delegate", payload: "on time" });
    await bus.send(good);
    const got: string[] = [];
    await bus.openMailbox("punctual", async (env) => void got.push(env.id));
    await poll(() => got.length === 1, { timeoutMs: 5_000, what: "good message" });
    expect(got).toEqual([good.id]);
    const [expired] = await dlqOf(bus, "expired");
    expect(expired!.headers["Kova-Dlq-Msg-Id"]).toBe(late.id);
    const [wrong] = await dlqOf(bus, "invalid_envelope");
    expect(wrong!.headers["Kova-Dlq-Error"]).toContain("someone-else");
  });

  it("dlq - an oversized payload is rejected before sending with PAYLOAD_TOO_LARGE and recorded in the DLQ", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    expect(bus.maxPayload).toBe(65536);
    const big = createEnvelope({ from: "a", to: "big", type: "task_delegate", payload: "x".repeat(70_000) });
    const err = await bus.send(big).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PayloadTooLargeError);
    expect((err as PayloadTooLargeError).code).toBe("PAYLOAD_TOO_LARGE");
    expect((err as Error).message).toContain(bus.subjects.a2a("big"));
    const [entry] = await dlqOf(bus, "payload_too_large");
    expect(entry!.headers["Kova-Dlq-Msg-Id"]).toBe(big.id);
    expect(Number(entry!.headers["Kova-Dlq-Original-Size"])).toBeGreaterThan(70_000);
    expect((await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages).toBe(0);
    const good = createEnvelope({ from: "a", to: "big", type: "task_delegate", payload: "small" });
    await bus.send(good);
    const got: string[] = [];
    await bus.openMailbox("big", async (env) => void got.push(env.id));
    await poll(() => got.length === 1, { timeoutMs: 5_000, what: "good message" });
    expect(got).toEqual([good.id]);
  });

  /** Header bytes as counted against max_payload: `NATS/1.0`, `\r\n<k>: <v>` each, `\r\n\r\n`. */
  const headerSize = (h: Record<string, string>) => 12 + Object.entries(h).reduce((n, [k, v]) => n + 4 + k.length + v.length, 0);

  /** Stores raw bytes in an agent's inbox with exactly these headers; the total must fit max_payload. */
  async function storeRaw(nc: NatsConnection, subject: string, data: Uint8Array, hdrs: Record<string, string>): Promise<number> {
    const h = headers();
    for (const [k, v] of Object.entries(hdrs)) h.set(k, v);
    const reply = await nc.request(subject, data, { headers: h, timeout: 5_000 });
    return reply.json<{ seq: number }>().seq;
  }

  it("dlq - a message of exactly max_payload (its own headers included) is dead-lettered whole: the body is never cut, headers yield instead", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    await using nc = await connect({ servers: server.url });
    const max = bus.maxPayload;
    const inbox = bus.subjects.a2a("bulky");
    // msgpack: a str32 that is not an envelope (invalid_envelope), with only a Nats-Msg-Id.
    const mpHeaders = { "Nats-Msg-Id": "whole-msgpack" };
    const mpBody = Buffer.alloc(max - headerSize(mpHeaders), 0x78);
    mpBody[0] = 0xdb;
    mpBody.writeUInt32BE(mpBody.length - 5, 1);
    // JSON: a string that is not an envelope, with its Content-Type.
    const jsonHeaders = { "Nats-Msg-Id": "whole-json", "Content-Type": "application/json" };
    const jsonBody = te.encode(`"${"y".repeat(max - headerSize(jsonHeaders) - 2)}"`);
    // Malformed msgpack 200 bytes short of the limit: room for the most useful headers.
    const nearHeaders = { "Nats-Msg-Id": "near" };
    const nearBody = Buffer.alloc(max - headerSize(nearHeaders) - 200, 0xc1);
    const seqs = [
      await storeRaw(nc, inbox, mpBody, mpHeaders),
      await storeRaw(nc, inbox, jsonBody, jsonHeaders),
      await storeRaw(nc, inbox, nearBody, nearHeaders),
    ];
    expect(mpBody.length + headerSize(mpHeaders)).toBe(max);
    expect(jsonBody.length + headerSize(jsonHeaders)).toBe(max);

    const got: string[] = [];
    await bus.openMailbox("bulky", async (env) => void got.push(env.id));
    const good = createEnvelope({ from: "a", to: "bulky", type: "task_delegate", payload: "small" });
    await bus.send(good);
    await poll(() => got.length === 1, { timeoutMs: 10_000, what: "good message" });

    const invalid = await dlqOf(bus, "invalid_envelope", 2);
    const mp = invalid.find((e) => e.data.length === mpBody.length && e.data[0] === 0xdb)!;
    const json = invalid.find((e) => e.headers["Content-Type"] === "application/json")!;
    expect(Buffer.from(mp.data).equals(mpBody)).toBe(true);
    expect(mp.subject).toBe(bus.subjects.dlq("invalid_envelope"));
    expect(mp.headers["Kova-Dlq-Truncated"]).toBeUndefined();
    expect(Buffer.from(json.data).equals(Buffer.from(jsonBody))).toBe(true);
    expect(decodeValueAsJson(json.data)).toMatch(/^y+$/);
    const [near] = await dlqOf(bus, "malformed_msgpack");
    expect(Buffer.from(near!.data).equals(nearBody)).toBe(true);
    expect(near!.headers).toMatchObject({
      "Kova-Dlq-Reason": "malformed_msgpack",
      "Kova-Dlq-Stream": bus.subjects.streams.a2a,
      "Kova-Dlq-Stream-Seq": String(seqs[2]),
      "Kova-Dlq-Headers-Trimmed": "true",
    });
    expect(near!.headers["Kova-Dlq-Error"]).toBeUndefined(); // the long text yields first; the log has it
    expect((await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages).toBe(0);
  });

  it("dlq - a valid envelope of exactly max_payload that fails max_deliver times is moved to the DLQ whole", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    await using nc = await connect({ servers: server.url });
    bus.startDlqMover();
    const max = bus.maxPayload;
    const sized = (n: number) => createEnvelope({ id: "max-size-1", from: "a", to: "heavy", type: "task_delegate", payload: "z".repeat(n) });
    const hdrs = { "Nats-Msg-Id": "max-size-1" };
    // A str16 payload grows the encoding byte for byte: solve for the exact size.
    const n = 1000 + (max - headerSize(hdrs) - encodeEnvelope(sized(1000)).length);
    const bytes = encodeEnvelope(sized(n));
    expect(bytes.length + headerSize(hdrs)).toBe(max);
    await storeRaw(nc, bus.subjects.a2a("heavy"), bytes, hdrs);
    const { attempts, done } = await poisonedMailbox(bus, "heavy", (env) => env.id === "max-size-1", { maxDeliver: 2, backoffMs: [20] });
    const next = createEnvelope({ from: "a", to: "heavy", type: "task_delegate", payload: "fine" });
    await bus.send(next);
    await poll(() => done.length === 1, { timeoutMs: 15_000, what: "next message" });
    const [entry] = await dlqOf(bus, "max_deliver");
    expect(Buffer.from(entry!.data).equals(Buffer.from(bytes))).toBe(true);
    expect(decodeEnvelope(entry!.data)).toEqual(sized(n));
    expect(attempts).toEqual([1, 2]);
    await poll(async () => (await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages === 0, {
      timeoutMs: 5_000,
      what: "removal from the WorkQueue",
    });
  });

  it("dlq - a message failing max_deliver times is moved to the DLQ via the advisory and the next message is processed", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    bus.startDlqMover();
    const poison = createEnvelope({ from: "a", to: "fragile", type: "task_delegate", payload: "poison" });
    const next = createEnvelope({ from: "a", to: "fragile", type: "task_delegate", payload: "fine" });
    await bus.send(poison);
    await bus.send(next);
    const { attempts, done } = await poisonedMailbox(bus, "fragile", (env) => env.payload === "poison", { maxDeliver: 3, backoffMs: [50] });
    await poll(() => done.length === 1, { timeoutMs: 15_000, what: "next message" });
    expect(done).toEqual([next.id]);
    expect(attempts).toEqual([1, 2, 3]);
    const [entry] = await dlqOf(bus, "max_deliver");
    expect(entry!.headers["Kova-Dlq-Msg-Id"]).toBe(poison.id);
    expect(entry!.headers["Kova-Dlq-Deliveries"]).toBe("3");
    expect(entry!.headers["Kova-Dlq-Agent"]).toBe("fragile");
    await poll(async () => (await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages === 0, {
      timeoutMs: 5_000,
      what: "removal from the WorkQueue",
    });
  });

  it("dlq - messages that exhausted max_deliver while no mover ran are swept into the DLQ when a mover starts", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    const poison = createEnvelope({ from: "a", to: "unlucky", type: "task_delegate", payload: "poison" });
    const next = createEnvelope({ from: "a", to: "unlucky", type: "task_delegate", payload: "fine" });
    await bus.send(poison);
    await bus.send(next);
    const done: string[] = [];
    await bus.openMailbox(
      "unlucky",
      async (env) => {
        if (env.payload === "poison") throw new Error("always fails");
        done.push(env.id);
      },
      { maxDeliver: 2, backoffMs: [20] },
    );
    await poll(() => done.length === 1, { timeoutMs: 10_000, what: "next message" });
    // Nobody listened to the advisory: the poison message stays in the WorkQueue stream once
    // the good message's ack (sent after the handler returned) has removed that one.
    const remaining = async () => (await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages;
    await poll(async () => (await remaining()) === 1, { timeoutMs: 10_000, what: "only the poison message left in the stream" });
    expect(await remaining()).toBe(1);
    expect(await bus.listDlq()).toEqual([]);
    const mover = bus.startDlqMover();
    expect(await mover.swept).toBe(1);
    const [entry] = await dlqOf(bus, "max_deliver");
    expect(entry!.headers["Kova-Dlq-Msg-Id"]).toBe(poison.id);
    expect((await bus.jsm.streams.info(bus.subjects.streams.a2a)).state.messages).toBe(0);
  });

  it("dlq - dead-lettering an envelope stores it under its reason with the error headers, once per reason and id, and listDlq shows it", async () => {
    await using bus = await connectBus(server.url, uniqueCluster());
    const env = createEnvelope({ from: "a", to: "picky", type: "task_delegate", payload: { n: 1 } });
    const error = new KovaError(ActorErrorCode.ACTOR_FAILED, "handler gave up\nafter 3 attempts");
    const seq = await bus.deadLetter(env, ActorDlqReason.handlerFailed, { error });
    // A retry (say, after a crash before the original's ack) is deduplicated.
    expect(await bus.deadLetter(env, ActorDlqReason.handlerFailed, { error })).toBe(seq);

    const entries = await bus.listDlq({ reason: "handler_failed" });
    expect(entries.map((e) => e.seq)).toEqual([seq]);
    const entry = entries[0]!;
    expect(entry.subject).toBe(bus.subjects.dlq("handler_failed"));
    expect(entry.headers["Kova-Dlq-Reason"]).toBe("handler_failed");
    expect(entry.headers["Kova-Dlq-Error-Code"]).toBe("ACTOR_FAILED");
    expect(entry.headers["Kova-Dlq-Error"]).toBe("handler gave up after 3 attempts");
    expect(entry.headers["Kova-Dlq-Msg-Id"]).toBe(env.id);
    expect(entry.headers["Kova-Dlq-Agent"]).toBe("picky");
    expect(entry.headers["Kova-Dlq-Subject"]).toBe(bus.subjects.a2a("picky"));
    expect(decodeEnvelope(entry.data)).toEqual(env);

    // Original bytes keep their Content-Type, so a JSON body stays decodable.
    const raw = encodeEnvelope(env, "json");
    const h = headers();
    h.set("Content-Type", "application/json");
    await bus.deadLetter(env, "my_layer_reason", { originalBytes: raw, headers: h });
    const [custom] = await bus.listDlq({ reason: "my_layer_reason" });
    expect(Buffer.from(custom!.data)).toEqual(Buffer.from(raw));
    expect(custom!.headers["Content-Type"]).toBe("application/json");
    expect(custom!.headers["Kova-Dlq-Error-Code"]).toBeUndefined();
    expect(decodeEnvelope(custom!.data, h)).toEqual(env);

    // A reason that is not one subject token is refused before anything is published.
    await expect(bus.deadLetter(env, "bad.reason")).rejects.toBeInstanceOf(InvalidIdError);
    expect((await bus.listDlq()).map((e) => e.reason).sort()).toEqual(["handler_failed", "my_layer_reason"]);
  });
});
