import { ArgumentError, KovaError } from "../core/index.js";
import { BusErrorCode, type BusPrincipal } from "../bus/index.js";
import { assertExperimentId } from "./protocol.js";
import type { TaskSpec } from "./spec.js";
import type { EvalStore, StoredSpecHead } from "./store.js";

/**
 * The node's side of `kova.<c>.control.eval` (docs/evals.md, "Starting an experiment"):
 * stores a spec sent in parts, so that whoever starts experiments needs no write access
 * to the evals bucket. Parts are checked before anything is stored (the head against its
 * tasks' digest), and an experiment's spec is written once: its attempts' records and its
 * status stay the experiment actor's alone to write.
 *
 * Bus principals (a `client` login) are refused: a spec runs with the cluster's powers
 * (tools and models other than an agent's own, code verifiers imported on the nodes,
 * external endpoints keyed by the nodes' environment, actor subjects addressed as the
 * experiment) and outside any principal's quotas (docs/security.md, "Experiments").
 */
export type EvalSpecRequest =
  | { op: "tasks"; experimentId: string; digest: string; index: number; tasks: TaskSpec[] }
  | { op: "spec"; experimentId: string; head: StoredSpecHead };

export interface EvalSpecReply {
  experimentId: string;
  stored: "tasks" | "spec";
}

/** What a bus principal gets from the eval endpoint: refused, with why and what to do instead. */
export class ExperimentsNotForPrincipalsError extends KovaError {
  constructor(principal: string) {
    super(
      BusErrorCode.PERMISSION_DENIED,
      `${principal} may not start experiments: an experiment runs with the cluster's powers (other tools and models than an agent's own, code verifiers, endpoints keyed by the nodes' environment) outside any principal's quotas; an operator starts it (kova eval run --owner <principal id> makes it that principal's)`,
      { data: { principal } },
    );
  }
}

/**
 * Handles one request of the eval endpoint.
 * @throws ExperimentsNotForPrincipalsError for a bus principal; ArgumentError for a malformed request;
 *   what EvalStore.putTasks / putHead throw (another spec stored under that id, a head whose tasks are missing or do not match)
 */
export async function handleEvalSpecRequest(store: EvalStore, body: Record<string, unknown>, sender: BusPrincipal | undefined): Promise<EvalSpecReply> {
  if (sender) throw new ExperimentsNotForPrincipalsError(sender.id);
  const experimentId = assertExperimentId(body.experimentId);
  if (body.op === "tasks") {
    const { digest, index, tasks } = body;
    if (typeof digest !== "string" || digest === "") throw new ArgumentError("digest", "must be the spec's digest (specParts names it)");
    if (!Number.isInteger(index) || (index as number) < 0 || (index as number) > 100_000) throw new ArgumentError("index", "must be a chunk number from 0");
    if (!Array.isArray(tasks)) throw new ArgumentError("tasks", "must be an array of tasks");
    await store.putTasks(experimentId, digest, index as number, tasks as TaskSpec[]);
    return { experimentId, stored: "tasks" };
  }
  if (body.op === "spec") {
    const head = body.head as StoredSpecHead | undefined;
    if (head === null || typeof head !== "object" || head.experimentId !== experimentId || !Number.isInteger(head.taskChunks)) {
      throw new ArgumentError("head", `must be the spec's head for ${experimentId} (specParts makes it)`);
    }
    await store.putHead(head);
    return { experimentId, stored: "spec" };
  }
  throw new ArgumentError("op", `${JSON.stringify(body.op)}: use "tasks" (each chunk of tasks) then "spec" (the head)`);
}
