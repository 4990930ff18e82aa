import type { Command } from "commander";
import { KovaError, isKovaError, isValidId } from "../core/index.js";
import { BusErrorCode, type NatsConnection } from "../bus/index.js";
import { APPROVAL_ID_FORM, ApprovalErrorCode } from "../agents/index.js";
import { approveSubject, controlRequest, type ApproveReply } from "../cluster/index.js";
import { WorkflowErrorCode } from "../workflow/index.js";
import { targetOptions, type TargetOpts } from "./target.js";
import { sendSignal, withClient } from "./workflow-commands.js";

/**
 * `kova approve|reject <runId> <approvalId|callId>`: one command for both kinds of approval.
 * An agent's tool call waiting for approval is decided through the nodes' `approve`
 * endpoint (`kova.<c>.control.approve`), which records the decision in the approvals
 * bucket; it is named by its approval id (`ap-` and 12 hex characters, as the gate makes
 * them) or by the tool call's id (any other form), which the endpoint resolves. When the
 * cluster has no such agent approval, the ids are tried as a workflow run's approval wait
 * (a `workflow.signal` to the run).
 */
export function register(program: Command): void {
  for (const [name, approved] of [
    ["approve", true],
    ["reject", false],
  ] as const) {
    targetOptions(
      program
        .command(`${name} <runId> <approvalId>`)
        .description(`${name} an agent's tool call (by its approval id or the tool call's id), or a workflow run's approval wait`),
    )
      .option("--comment <text>", "recorded with the decision (a rejected call's comment reaches the model)")
      .option("--by <name>", "who decides (default: $USER)")
      .action((runId: string, approvalId: string, o: TargetOpts & { comment?: string; by?: string }) =>
        withClient(o, async (client) => {
          const by = o.by ?? process.env.USER;
          const verb = approved ? "approved" : "rejected";
          const decision = { approved, ...(by ? { by } : {}), ...(o.comment ? { comment: o.comment } : {}) };
          const agent = await decideAgentApproval(client.bus.nc, client.bus.cluster, runId, approvalId, decision);
          if (!(agent instanceof Error)) {
            const call = agent.approvalId === approvalId ? "" : ` (tool call ${agent.callId})`;
            process.stdout.write(
              `${agent.changed ? verb : `already ${verb}`} ${agent.approvalId}${call} of ${runId} (agent ${agent.agentId}, tool ${agent.tool})\n`,
            );
            return;
          }
          let outcome: string;
          try {
            outcome = await sendSignal(client, runId, { approvalId, ...decision });
          } catch (err) {
            if (!isKovaError(err, WorkflowErrorCode.RUN_NOT_FOUND)) throw err;
            // Neither kind: say what was looked for, and why each missed.
            throw new KovaError(
              ApprovalErrorCode.APPROVAL_NOT_FOUND,
              `no approval ${approvalId} of run ${runId}: ${agent.message}; and as a workflow run: ${(err as Error).message}`,
              {
                data: { runId, approvalId },
              },
            );
          }
          process.stdout.write(
            outcome === "delivered"
              ? `${verb} ${approvalId} of ${runId}\n`
              : `run ${runId} has no open approval ${approvalId} yet; the decision is kept until it asks\n`,
          );
        }),
      );
  }
}

/**
 * Decides an agent's tool-call approval through the nodes' `approve` endpoint.
 * @param id an approval id, or the id of the tool call it holds
 * @returns the reply, or the reason it is not an agent approval (no such record, no node
 *   answering, a run id an agent run cannot have)
 * @throws the endpoint's other errors (already decided, invalid)
 */
async function decideAgentApproval(
  nc: NatsConnection,
  cluster: string,
  runId: string,
  id: string,
  decision: { approved: boolean; by?: string; comment?: string },
): Promise<ApproveReply | Error> {
  if (!isValidId(runId)) return new Error(`${runId} is not an agent run id`);
  const target = APPROVAL_ID_FORM.test(id) ? { approvalId: id } : { callId: id };
  try {
    return await controlRequest<ApproveReply>(nc, approveSubject(cluster), { runId, ...target, ...decision });
  } catch (err) {
    if (isKovaError(err, ApprovalErrorCode.APPROVAL_NOT_FOUND) || isKovaError(err, BusErrorCode.NO_RESPONDERS)) return err as Error;
    throw err;
  }
}
