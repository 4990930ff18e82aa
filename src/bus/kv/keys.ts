/**
 * A one-shot listing of a KV bucket's live keys, without `kv.keys()`.
 *
 * `kv.keys()` (nats.js v3) reads through an ordered push consumer; when the bucket's stream
 * is rewritten under it (a rebalance moves many registry entries at once) the consumer
 * resets and the listing only ends at the next idle heartbeat, ~30 s later. A listing here
 * is two kinds of plain request/reply instead, each bounded by a timeout:
 *
 * 1. The keys: STREAM.INFO of `KV_<bucket>` with `subjects_filter`, which answers with the
 *    stream's subjects (one per key that still has a message). The server sends at most
 *    100,000 subjects per answer; nats.js's `streams.info` asks for the further pages by
 *    `offset` itself and merges them. One page is one consistent snapshot; across pages a
 *    key removed entirely between two requests can shift another across a page boundary.
 * 2. Which of those keys are live: a key's subject stays in that list after `kv.delete` or
 *    `kv.purge`, because the key's last message is then the DEL/PURGE marker, and the subject
 *    counts cannot tell a marker from a value. So each key's last message is read (a
 *    last-by-subject get, as `kv.get` does) and markers are left out, as `kv.keys()` left
 *    them out. On nats-server 2.9 no request reads only headers or many subjects at once,
 *    and every caller wants the values anyway, so the entries read are what is returned:
 *    nobody reads a key twice.
 *
 * Permissions: STREAM.INFO on `KV_<bucket>` and STREAM.MSG.GET on it (deploy/nats/
 * accounts.conf); no consumer is created.
 */
import { jetstream, type JetStreamClient, type StreamInfo } from "@nats-io/jetstream";
import { Kvm, type KvEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { ArgumentError, KovaTimeoutError } from "../../core/index.js";
import { BucketNotFoundError } from "../errors.js";
import { isStreamNotFound } from "../nats-errors.js";

/** How long a listing may take by default: every page and every read together. */
export const DEFAULT_KV_LIST_TIMEOUT_MS = 30_000;

/**
 * Reads in flight at once: enough to hide the round trip. More is slower, not faster, on
 * one server (5k reads/s at 64 or 256 against 7k at 16 on a loaded 2-core machine).
 */
const READS_IN_FLIGHT = 16;

const BUCKET_NAME = /^[-\w]+$/;
/** A KV key pattern: key tokens, `*` for one token, `>` for the rest (last token only). */
const KEY_TOKEN = /^(?:[-/=\w]+|\*)$/;

export interface KvListOptions {
  /** Only keys matching this pattern (`runs.*`, `a.>`); default every key. */
  filter?: string;
  /** The whole listing must finish within this; default {@link DEFAULT_KV_LIST_TIMEOUT_MS}. */
  timeoutMs?: number;
}

/**
 * The live entries of a bucket (last value of every key that is neither deleted nor
 * purged), by key in key order.
 * @throws BucketNotFoundError when the bucket does not exist; KovaTimeoutError past `timeoutMs`;
 *   ArgumentError for a bad bucket name, filter or timeout; the server's permission error
 *   when this user may not read the bucket
 */
export async function readKvEntries(conn: NatsConnection | JetStreamClient, bucket: string, opts: KvListOptions = {}): Promise<Map<string, KvEntry>> {
  const filter = opts.filter ?? ">";
  const timeoutMs = opts.timeoutMs ?? DEFAULT_KV_LIST_TIMEOUT_MS;
  checkArguments(bucket, filter, timeoutMs);
  let expired = false;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      expired = true;
      reject(new KovaTimeoutError(`listing the keys of KV bucket ${bucket}`, timeoutMs, { data: { bucket } }));
    }, timeoutMs);
  });
  const listing = readLive(conn, bucket, filter, timeoutMs, () => expired);
  // Past the deadline nobody awaits the listing any more: its late failure is not news.
  listing.catch(() => undefined);
  try {
    return await Promise.race([listing, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** The live keys of a bucket, sorted; see {@link readKvEntries} (same options and errors). */
export async function listKvKeys(conn: NatsConnection | JetStreamClient, bucket: string, opts: KvListOptions = {}): Promise<string[]> {
  return [...(await readKvEntries(conn, bucket, opts)).keys()];
}

function checkArguments(bucket: string, filter: string, timeoutMs: number): void {
  if (!BUCKET_NAME.test(bucket)) throw new ArgumentError("bucket", `${JSON.stringify(bucket)} is not a KV bucket name: use [A-Za-z0-9_-]`);
  const tokens = filter.split(".");
  if (!tokens.every((t, i) => KEY_TOKEN.test(t) || (t === ">" && i === tokens.length - 1))) {
    throw new ArgumentError(
      "filter",
      `${JSON.stringify(filter)} is not a KV key pattern: dot-separated tokens of [A-Za-z0-9_=/-], "*" for one token, ">" as the last token for the rest`,
    );
  }
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new ArgumentError("timeoutMs", `${timeoutMs} is not a positive number of milliseconds`);
}

async function readLive(
  conn: NatsConnection | JetStreamClient,
  bucket: string,
  filter: string,
  timeoutMs: number,
  expired: () => boolean,
): Promise<Map<string, KvEntry>> {
  // On a connection no single request may outlive the whole listing; a JetStreamClient
  // keeps its own request timeout (the deadline still bounds the listing).
  const js = "jetstreamManager" in conn ? conn : jetstream(conn, { timeout: timeoutMs });
  const jsm = await js.jetstreamManager(false);
  const prefix = `$KV.${bucket}.`;
  let info: StreamInfo;
  try {
    info = await jsm.streams.info(`KV_${bucket}`, { subjects_filter: `${prefix}${filter}` });
  } catch (err) {
    if (isStreamNotFound(err)) throw new BucketNotFoundError(bucket, { cause: err });
    throw err;
  }
  const keys = Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
  // Bound without a further request. Reads go to STREAM.MSG.GET, which the stream's leader
  // answers, not to direct gets (faster, but any replica answers them): a replica a moment
  // behind the leader that gave the subject list could miss a key that list holds.
  const kv = await new Kvm(js).open(bucket, { allow_direct: false });
  const live = new Map<string, KvEntry>();
  let next = 0;
  const reader = async () => {
    while (next < keys.length && !expired()) {
      const e = await kv.get(keys[next++]!);
      // null: the key's messages were purged away since the subject list was taken.
      if (e?.operation === "PUT") live.set(e.key, e);
    }
  };
  await Promise.all(Array.from({ length: Math.min(READS_IN_FLIGHT, keys.length) }, reader));
  // In key order (the readers finish out of order).
  return new Map([...live].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
