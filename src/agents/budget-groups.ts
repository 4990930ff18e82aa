import { bucketName, KvStore, type KvConnection } from "../bus/index.js";
import { recordFormat } from "../core/index.js";
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

/** Format version of a group's stored total (totals written before versioning have no `v`: version 1). */
export const GROUP_TOTAL_VERSION = 1;

/** A group's total as stored: `{ v, used, ts }`. */
interface GroupTotal {
  used: number;
  /** Epoch ms of the last charge. */
  ts: number;
}

/** Charges that lose their compare-and-set to other nodes' charges of the group, before one gives up (KV_CONFLICT). */
const CHARGE_ATTEMPTS = 50;

/**
 * A group's total in `bucket`. Anything but a finite number >= 0 is corrupt, never read as 0;
 * a value a newer Kova wrote is refused, so no charge overwrites it.
 */
function groupTotalFormat(bucket: string) {
  return recordFormat<GroupTotal>({
    describe: (key) => `budget group ${key} in ${bucket}`,
    version: GROUP_TOTAL_VERSION,
    readable: [1],
    read: (key, value) => {
      const used = (value as { used?: unknown } | null)?.used;
      if (typeof value !== "object" || value === null || !isUsageAmount(used))
        throw new BudgetLedgerCorruptError(bucket, key, JSON.stringify(value).slice(0, 200));
      return value as GroupTotal;
    },
  });
}

/**
 * The total a group's stored value holds.
 * @param bucket named in errors, so an operator can fix a key by hand
 * @throws BudgetLedgerCorruptError; UnsupportedFormatError for a newer format
 */
export function readGroupTotal(bucket: string, key: string, value: unknown): number {
  return groupTotalFormat(bucket).decode(key, value).used;
}

/**
 * Budget groups in NATS KV `kova_<cluster>_agent_budgets`, one key per group
 * (`group.<name>`, `session.<id>`, `user.<id>`), JSON `{ v, used, ts }`. A charge is a
 * compare-and-set on the key's revision, retried on conflict, so agents on any number of
 * nodes add to one total and none of their charges is lost.
 */
export class NatsGroupLedger implements GroupLedger {
  private constructor(readonly store: KvStore<GroupTotal>) {}

  /** @throws JetStream errors when JetStream is unavailable */
  static async open(opts: { js: KvConnection; cluster: string; replicas?: number }): Promise<NatsGroupLedger> {
    const bucket = bucketName(opts.cluster, "agentBudgets");
    const store = await KvStore.open(opts.js, opts.cluster, "agentBudgets", groupTotalFormat(bucket), {
      replicas: opts.replicas,
      unreadable: (key, text) => new BudgetLedgerCorruptError(bucket, key, text.slice(0, 200)),
    });
    return new NatsGroupLedger(store);
  }

  async used(key: string): Promise<number> {
    return (await this.store.get(key))?.value.used ?? 0;
  }

  async charge(key: string, tokens: number): Promise<number> {
    if (!isUsageAmount(tokens)) throw new BudgetChargeInvalidError(key, tokens);
    // Another node charging the group between our read and write makes us read again.
    const out = await this.store.change(key, (cur) => ({ used: (cur?.value.used ?? 0) + tokens, ts: Date.now() }), { attempts: CHARGE_ATTEMPTS });
    return out!.value.used;
  }
}
