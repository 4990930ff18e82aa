/**
 * A config module for node processes (`modules = [LEDGER_TOOL_MODULE]`, see
 * tool-loop-load.ts): the tool `ledger_charge`, which is not idempotent. Each call appends
 * one line `{ agent, job, step, pid, at }` to the ledger file its arguments name, after
 * holding for `holdMs` (so that a fault lands inside the call more often); a call cut short
 * while it holds leaves no line. A (job, step) in the ledger twice is a tool call that ran
 * twice. Appends of one short line are atomic on a local file system (O_APPEND), so node
 * processes share the file.
 */
import { appendFileSync } from "node:fs";
import { sleep } from "../core/index.js";
import { defineTool } from "../tools/index.js";

export interface LedgerArgs {
  ledger: string;
  agent: string;
  job: string;
  step: number;
  holdMs?: number;
}

export const ledgerCharge = defineTool<LedgerArgs, { charged: number }>({
  name: "ledger_charge",
  description: "Charges one step of a job to the ledger. Not idempotent: every call is a charge.",
  idempotent: false,
  parameters: {
    type: "object",
    properties: {
      ledger: { type: "string" },
      agent: { type: "string" },
      job: { type: "string" },
      step: { type: "integer", minimum: 1 },
      holdMs: { type: "integer", minimum: 0 },
    },
    required: ["ledger", "agent", "job", "step"],
    additionalProperties: false,
  },
  run: async (args, ctx) => {
    if (args.holdMs) await sleep(args.holdMs, ctx.signal);
    appendFileSync(args.ledger, `${JSON.stringify({ agent: args.agent, job: args.job, step: args.step, pid: process.pid, at: Date.now() })}\n`);
    return { charged: args.step };
  },
});
