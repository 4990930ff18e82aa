import type { JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { isMessageGone } from "../bus/index.js";

/** What one compaction of a bucket did. */
export interface MarkerCompactionReport {
  bucket: string;
  /** Keys read (their last entry each, headers only). */
  scanned: number;
  /** Delete/purge markers old enough to go. */
  markers: number;
  /** Markers this call removed (a peer compacting at once may have removed the others). */
  removed: number;
  ms: number;
}

export interface MarkerCompactionOptions {
  /** Markers written longer ago than this are removed (younger ones may not have reached every watch yet). */
  olderThanMs: number;
  /** Delete requests in flight at once (default 64). */
  concurrency?: number;
  now?: () => number;
}

/**
 * Removes the delete/purge markers that passivations leave in a KV bucket (the registry
 * and the leases keep one per passivated instance, forever otherwise), so that a node
 * (re)starting reads live keys only instead of every instance that ever ran.
 *
 * Each marker is deleted as one message, by its own sequence: a value written to the key
 * after the marker is a newer message and stays, so a compaction racing an activation
 * never removes the activation's entry. (A KV `create` that read the marker's revision just
 * before it went gets a CAS conflict, which the registry and the leases already treat as
 * "someone else wrote it": the activation sweep or placement retries.) The stream's last
 * message is kept even when it is a marker: a KV watch that starts knows it is caught up
 * when it has delivered the stream's last sequence, without waiting for an idle period.
 * Markers younger than `olderThanMs` stay, so every node's watch has seen them (a watch
 * that misses a marker would keep the deleted value). Idempotent: two nodes compacting at
 * once only find fewer messages to delete.
 * @throws JetStream errors other than "no such message"
 */
export async function compactMarkers(kv: KV, jsm: JetStreamManager, opts: MarkerCompactionOptions): Promise<MarkerCompactionReport> {
  const started = performance.now();
  const now = opts.now ?? Date.now;
  const status = await kv.status();
  const report: MarkerCompactionReport = { bucket: status.bucket, scanned: 0, markers: 0, removed: 0, ms: 0 };
  if (status.values === 0) return report;
  const stream = status.streamInfo.config.name;
  const lastSeq = status.streamInfo.state.last_seq;
  const cutoff = now() - opts.olderThanMs;
  const old: number[] = [];
  // The last entry of every key as of now, headers only; ends with the last pending one.
  const iter = await kv.watch({ headers_only: true, ignoreDeletes: false });
  try {
    for await (const e of iter) {
      report.scanned++;
      if ((e.operation === "DEL" || e.operation === "PURGE") && e.revision !== lastSeq && e.created.getTime() < cutoff) old.push(e.revision);
      if (e.delta === 0 || e.revision >= lastSeq) break;
    }
  } finally {
    iter.stop();
  }
  report.markers = old.length;
  let next = 0;
  const worker = async () => {
    while (next < old.length) {
      const seq = old[next++]!;
      try {
        if (await jsm.streams.deleteMessage(stream, seq, false)) report.removed++;
      } catch (err) {
        if (!isMessageGone(err)) throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.concurrency ?? 64, old.length) }, worker));
  report.ms = Math.round(performance.now() - started);
  return report;
}
