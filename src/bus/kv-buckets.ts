import type { JetStreamClient } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { isStreamNameInUse, isSubjectOverlap } from "./nats-errors.js";

/**
 * Opens a KV bucket, creating it when missing. Nodes that start together create the same
 * buckets at the same moment, and nats-server 2.9 registers a new stream only once its store
 * is set up: the loser of two concurrent creates then hears "subjects overlap with an
 * existing stream" (10065) — or "stream name already in use" (10058) — although the bucket
 * it wanted now exists. Such a loss is retried (the retry finds the bucket and opens it), so
 * a node does not exit at start because a peer was a few milliseconds faster (seen in
 * test/e2e/workflow-sigkill.test.ts: a node exited with that message about one start in 15
 * on a loaded machine).
 * @throws JetStream errors other than a lost creation race, or the race's error after 3 tries
 */
export async function openOrCreateBucket(conn: JetStreamClient | NatsConnection, name: string, opts: Partial<KvOptions>): Promise<KV> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await new Kvm(conn).create(name, opts);
    } catch (err) {
      if (attempt >= 3 || !(isSubjectOverlap(err) || isStreamNameInUse(err))) throw err;
      await new Promise((r) => setTimeout(r, 50 * attempt));
    }
  }
}
