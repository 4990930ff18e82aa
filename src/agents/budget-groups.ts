import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import { isWrongLastSequence } from "../bus/nats-errors.js";

/** Token use of budget groups shared across the cluster. */
export interface GroupLedger {
  /** Tokens charged to the group so far. */
  used(key: string): Promise<number>;
  /** Adds tokens to the group; resolves with the new total. */
  charge(key: string, tokens: number): Promise<number>;
}

const enc = new TextEncoder();

/**
 * Budget groups in NATS KV `kova_<cluster>_agent_budgets`, one key per group
 * (`group.<name>`, `session.<id>`, `user.<id>`), JSON `{ used }`. A charge is a
 * compare-and-set on the key's revision, retried on conflict, so agents on any number of
 * nodes add to one total and none of their charges is lost.
 */
export class NatsGroupLedger implements GroupLedger {
  private constructor(readonly kv: KV) {}

  static bucketName(cluster: string): string {
    return `kova_${cluster}_agent_budgets`;
  }

  /** @throws JetStream errors when JetStream is unavailable */
  static async open(opts: { js: JetStreamClient; cluster: string; replicas?: number }): Promise<NatsGroupLedger> {
    const kv = await openOrCreateBucket(opts.js, NatsGroupLedger.bucketName(opts.cluster), { history: 1, replicas: opts.replicas ?? 1 });
    return new NatsGroupLedger(kv);
  }

  async used(key: string): Promise<number> {
    const e = await this.kv.get(key);
    return e === null || e.operation !== "PUT" ? 0 : (e.json<{ used: number }>().used ?? 0);
  }

  async charge(key: string, tokens: number): Promise<number> {
    for (;;) {
      const e = await this.kv.get(key);
      const exists = e !== null && e.operation === "PUT";
      const used = (exists ? (e.json<{ used: number }>().used ?? 0) : 0) + tokens;
      const data = enc.encode(JSON.stringify({ used, ts: Date.now() }));
      try {
        if (e === null) await this.kv.create(key, data);
        else await this.kv.update(key, data, e.revision);
        return used;
      } catch (err) {
        // Another node charged the group between our read and write: read again.
        if (!isWrongLastSequence(err)) throw err;
      }
    }
  }
}
