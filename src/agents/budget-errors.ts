import { defineErrorCodes, KovaError } from "../core/index.js";

/**
 * Error codes of the shared budget ledger. They live beside the ledger (budget*.ts) rather
 * than in errors.ts; same "agents" layer.
 */
export const BudgetErrorCode = defineErrorCodes("agents", {
  BUDGET_CHARGE_INVALID: "BUDGET_CHARGE_INVALID",
  BUDGET_LEDGER_CORRUPT: "BUDGET_LEDGER_CORRUPT",
});

/**
 * A charge that is not a finite, non-negative number of tokens. Refused rather than
 * ignored: stored, it would poison the group's total (NaN compares false against every
 * limit, which disables the budget for every agent on every node), and ignored, a
 * provider reporting bad usage would spend for free.
 */
export class BudgetChargeInvalidError extends KovaError {
  constructor(key: string, tokens: unknown) {
    super(
      BudgetErrorCode.BUDGET_CHARGE_INVALID,
      `budget ${key}: refused to charge ${describeNumber(tokens)} tokens; a charge must be a finite number >= 0 (the model's reported usage is broken: check the provider)`,
      { data: { key, tokens: describeNumber(tokens) } },
    );
  }
}

/**
 * The ledger holds a total that is not a finite number >= 0 (written by hand or by an old
 * version). Runs charging the group are refused until it is fixed, so the budget stays
 * enforced instead of silently lifting or restarting at 0.
 */
export class BudgetLedgerCorruptError extends KovaError {
  constructor(bucket: string, key: string, stored: string) {
    super(
      BudgetErrorCode.BUDGET_LEDGER_CORRUPT,
      `budget ledger ${bucket} key ${key} holds ${stored}, not a token count; runs charging it are refused until it is fixed: ` +
        `put the right total (nats kv put ${bucket} ${key} '{"used":<tokens>}') or delete the key to restart the count at 0 (nats kv del ${bucket} ${key})`,
      { data: { bucket, key, stored } },
    );
  }
}

function describeNumber(v: unknown): string {
  return typeof v === "number" ? String(v) : `${typeof v} ${JSON.stringify(v) ?? ""}`.trim();
}
