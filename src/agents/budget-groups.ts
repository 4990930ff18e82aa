import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import { isWrongLastSequence } from "../bus/nats-errors.js";
import { BudgetChargeInvalidError, BudgetLedgerCorruptError } from "./budget-errors.js";
import { isUsageAmount } from "./usage.js";

/** Token use of budget groups shared across the cluster. */
export interface GroupLedger {
  /**
   * Tokens charged to the group so far.
   * @throws BudgetLedgerCorruptError when the stored total is not a finite number >= 0
   */
  used(key: string): Promise<number>;
  /**
   * Adds tokens to the group; resolves with the new total.
   * @throws BudgetChargeInvalidError when tokens is not a finite number >= 0
   * @throws BudgetLedgerCorruptError when the stored total is not a finite number >= 0
   */
  charge(key: string, tokens: number): Promise<number>;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * Budget groups in NATS KV `kova_<cluster>_agent_budgets`, one key per group
 * (`group.<name>`, `session.<id>`, `user.<id>`), JSON `{ used }`. A charge is a
 * compare-and-set on the key's revision, retried on conflict, so agents on any number of
 * nodes add to one total and none of their charges is lost.
 */
export class NatsGroupLedger implements GroupLedger {
  private constructor(
    readonly kv: KV,
    /** Named in errors so an operator can fix a key by hand. */
    private readonly bucket: string,
  ) {}

  static bucketName(cluster: string): string {
    return `kova_${cluster}_agent_budgets`;
  }

  /** @throws JetStream errors when JetStream is unavailable */
  static async open(opts: { js: JetStreamClient; cluster: string; replicas?: number }): Promise<NatsGroupLedger> {
    const bucket = NatsGroupLedger.bucketName(opts.cluster);
    const kv = await openOrCreateBucket(opts.js, bucket, { history: 1, replicas: opts.replicas ?? 1 });
    return new NatsGroupLedger(kv, bucket);
  }

  async used(key: string): Promise<number> {
    const e = await this.kv.get(key);
    return e === null || e.operation !== "PUT" ? 0 : this.storedTotal(key, e.value);
  }

  async charge(key: string, tokens: number): Promise<number> {
    if (!isUsageAmount(tokens)) throw new BudgetChargeInvalidError(key, tokens);
    for (;;) {
      const e = await this.kv.get(key);
      const exists = e !== null && e.operation === "PUT";
      const used = (exists ? this.storedTotal(key, e.value) : 0) + tokens;
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

  /** The total a key holds; anything but a finite number >= 0 is corrupt, never read as 0. */
  private storedTotal(key: string, value: Uint8Array): number {
    const text = dec.decode(value);
    let used: unknown;
    try {
      used = (JSON.parse(text) as { used?: unknown } | null)?.used;
    } catch {
      used = undefined;
    }
    if (!isUsageAmount(used)) throw new BudgetLedgerCorruptError(this.bucket, key, text.slice(0, 200));
    return used;
  }
}
