import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import { checkFormatVersion } from "../core/format-version.js";
import { isWrongLastSequence } from "../bus/nats-errors.js";
import { BudgetChargeInvalidError, BudgetLedgerCorruptError } from "./budget-errors.js";
import { isUsageAmount } from "./usage.js";

/** Token use of budget groups shared across the cluster. */
export interface GroupLedger {
  /**
   * Tokens charged to the group so far.
   * @throws BudgetLedgerCorruptError when the stored total is not a finite number >= 0;
   *   UnsupportedFormatError when a newer Kova stored it
   */
  used(key: string): Promise<number>;
  /**
   * Adds tokens to the group; resolves with the new total.
   * @throws BudgetChargeInvalidError when tokens is not a finite number >= 0
   * @throws BudgetLedgerCorruptError when the stored total is not a finite number >= 0;
   *   UnsupportedFormatError when a newer Kova stored it
   */
  charge(key: string, tokens: number): Promise<number>;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** Format version of a group's stored total (totals written before versioning have no `v`: version 1). */
export const GROUP_TOTAL_VERSION = 1;
const READABLE: readonly number[] = [1];

/**
 * The total a group's stored value holds. Anything but a finite number >= 0 is corrupt,
 * never read as 0; a value a newer Kova wrote is refused, so no charge overwrites it.
 * @param bucket named in errors, so an operator can fix a key by hand
 * @throws BudgetLedgerCorruptError; UnsupportedFormatError for a newer format
 */
export function readGroupTotal(bucket: string, key: string, value: Uint8Array): number {
  const text = dec.decode(value);
  let stored: { v?: unknown; used?: unknown } | null | undefined;
  try {
    stored = JSON.parse(text) as typeof stored;
  } catch {
    stored = undefined;
  }
  if (typeof stored !== "object" || stored === null) throw new BudgetLedgerCorruptError(bucket, key, text.slice(0, 200));
  checkFormatVersion(`budget group ${key} in ${bucket}`, stored.v, READABLE);
  if (!isUsageAmount(stored.used)) throw new BudgetLedgerCorruptError(bucket, key, text.slice(0, 200));
  return stored.used;
}

/**
 * Budget groups in NATS KV `kova_<cluster>_agent_budgets`, one key per group
 * (`group.<name>`, `session.<id>`, `user.<id>`), JSON `{ v, used, ts }`. A charge is a
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
      const data = enc.encode(JSON.stringify({ v: GROUP_TOTAL_VERSION, used, ts: Date.now() }));
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

  private storedTotal(key: string, value: Uint8Array): number {
    return readGroupTotal(this.bucket, key, value);
  }
}
