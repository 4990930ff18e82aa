import type { Command } from "commander";
import { KovaError, isKovaError } from "../core/errors.js";
import { BusErrorCode } from "../bus/index.js";
import { ApprovalErrorCode } from "../agents/approvals.js";
import { approveSubject, controlRequest, type ApproveReply } from "../node/control.js";
import { WorkflowErrorCode } from "../workflow/index.js";
import { targetOptions, type TargetOpts } from "./target.js";
import { sendSignal, withClient } from "./workflow-commands.js";

/**
 * `kova approve|reject <runId> <approvalId>`: one command for both kinds of approval.
 * An agent's tool call waiting for approval is decided through the nodes' `approve`
 * endpoint (`kova.<c>.control.approve`), which records the decision in the approvals
 * bucket; when the cluster has no such agent approval, the ids are tried as a workflow
 * run's approval wait (a `workflow.signal` to the run).
 */
export function register(program: Command): void {
  for (const [name, approved] of [["approve", true], ["reject", false]] as const) {
    targetOptions(program.command(`${name} <runId> <approvalId>`).description(`${name} an agent's tool call, or a workflow run's approval wait`))
      .option("--comment <text>", "recorded with the decision (a rejected call's comment reaches the model)")
      .option("--by <name>", "who decides (default: $USER)")
      .action((runId: string, approvalId: string, o: TargetOpts & { comment?: string; by?: string }) =>
        withClient(o, async (client) => {
          const by = o.by ?? process.env.USER;
          const verb = approved ? "approved" : "rejected";
          let agentMiss: unknown;
          try {
            const reply = await controlRequest<ApproveReply>(client.bus.nc, approveSubject(client.bus.cluster), {
              runId,
              approvalId,
              approved,
              ...(by ? { by } : {}),
              ...(o.comment ? { comment: o.comment } : {}),
            });
            process.stdout.write(`${reply.changed ? verb : `already ${verb}`} ${approvalId} of ${runId} (agent ${reply.agentId}, tool ${reply.tool})\n`);
            return;
          } catch (err) {
            if (!isKovaError(err, ApprovalErrorCode.APPROVAL_NOT_FOUND) && !isKovaError(err, BusErrorCode.NO_RESPONDERS)) throw err;
            agentMiss = err;
          }
          let outcome: string;
          try {
            outcome = await sendSignal(client, runId, { approvalId, approved, ...(by ? { by } : {}), ...(o.comment ? { comment: o.comment } : {}) });
          } catch (err) {
            if (!isKovaError(err, WorkflowErrorCode.RUN_NOT_FOUND)) throw err;
            // Neither kind: say what was looked for, and why each missed.
            throw new KovaError(ApprovalErrorCode.APPROVAL_NOT_FOUND, `no approval ${approvalId} of run ${runId}: ${(agentMiss as Error).message}; and as a workflow run: ${(err as Error).message}`, {
              data: { runId, approvalId },
            });
          }
          process.stdout.write(outcome === "delivered" ? `${verb} ${approvalId} of ${runId}\n` : `run ${runId} has no open approval ${approvalId} yet; the decision is kept until it asks\n`);
        }),
      );
  }
}
