import { KvStore, type KvConnection } from "../bus/index.js";
import { ArgumentError, classifyErrorCodes, defineErrorCodes, KovaError, recordFormat, assertId, silentLogger } from "../core/index.js";

/**
 * Human approval of tool calls (docs/tools.md, "Approval"). A call that needs approval is
 * a record in NATS KV `kova_<cluster>_approvals`, key `<runId>.<approvalId>`, written by
 * the node that runs the call (`pending`, with its deadline), decided by any node's
 * `approve` control endpoint (`approved` / `rejected`), or by the waiting node when the
 * deadline passes (`rejected`, `timedOut`). Every transition out of `pending` is a
 * compare-and-set on the key's revision, so a human's decision and the timeout cannot
 * both win, and a decision made while the agent's node is down waits in the bucket for
 * the node that resumes the run.
 */
export const ApprovalErrorCode = defineErrorCodes("agents", {
  APPROVAL_NOT_FOUND: "APPROVAL_NOT_FOUND",
  APPROVAL_ALREADY_DECIDED: "APPROVAL_ALREADY_DECIDED",
  TOOL_CALL_REJECTED: "TOOL_CALL_REJECTED",
  TOOL_APPROVAL_TIMEOUT: "TOOL_APPROVAL_TIMEOUT",
});
classifyErrorCodes({ [ApprovalErrorCode.APPROVAL_NOT_FOUND]: "not_found" });

export type ApprovalStatus = "pending" | "approved" | "rejected";

/** One approval, as stored (JSON, format version `v`). */
export interface ApprovalRecord {
  v: 1;
  runId: string;
  approvalId: string;
  sessionId: string;
  agentId: string;
  callId: string;
  /** The tool's Kova name (`shell_exec`, `everything/echo`). */
  tool: string;
  args: unknown;
  requestedAt: number;
  /** Epoch ms: no decision by then rejects the call. */
  expiresAt: number;
  status: ApprovalStatus;
  decidedAt?: number;
  by?: string;
  comment?: string;
  /** Rejected by the deadline, not by a person. */
  timedOut?: boolean;
}

/** A decision as a person (or a service) gives it. */
export interface ApprovalDecision {
  approved: boolean;
  by?: string;
  comment?: string;
}

/** Upper bound of `approval.timeout`: the bucket keeps records twice as long. */
export const MAX_APPROVAL_TIMEOUT_MS = 7 * 86_400_000;
export const DEFAULT_APPROVAL_TIMEOUT_MS = 3_600_000;

const BY_MAX = 128;
const COMMENT_MAX = 2_000;
/** Models' call ids are short (`call_` and 24 characters from OpenAI); this only bounds a hostile one. */
const CALL_ID_MAX = 256;

/** No such approval (wrong ids, or the run never asked). */
export class ApprovalNotFoundError extends KovaError {
  /** @param by what `id` is: an approval id, or the id of the tool call the approval is for */
  constructor(runId: string, id: string, by: "approvalId" | "callId" = "approvalId") {
    super(
      ApprovalErrorCode.APPROVAL_NOT_FOUND,
      `run ${runId} has no approval ${by === "callId" ? `for tool call ${id}` : id}: take the ids from the approval_requested event (or kova events tail --session <s>)`,
      {
        data: { runId, [by]: id },
      },
    );
  }
}

/** What `kova approve <runId> <id>` names: an approval by its id, or by its tool call's id. */
export type ApprovalTarget = { approvalId: string } | { callId: string };

/** The form of the ids the approval gate gives (`ap-` and 12 hex characters). */
export const APPROVAL_ID_FORM = /^ap-[0-9a-f]{12}$/;

/** A second, different decision for an approval that is decided already. */
export class ApprovalAlreadyDecidedError extends KovaError {
  constructor(readonly record: ApprovalRecord) {
    super(
      ApprovalErrorCode.APPROVAL_ALREADY_DECIDED,
      `approval ${record.approvalId} of run ${record.runId} was ${record.timedOut ? "rejected by its timeout" : `${record.status}${record.by ? ` by ${record.by}` : ""}`} already; a decision cannot be changed`,
      { data: { runId: record.runId, approvalId: record.approvalId, status: record.status, timedOut: record.timedOut === true } },
    );
  }
}

/**
 * Reads a decision sent by a remote caller: the approval named by `approvalId`, or by
 * `callId` (the tool call it holds), never both.
 * @throws ArgumentError naming the field
 */
export function readDecision(raw: unknown): { runId: string; target: ApprovalTarget; decision: ApprovalDecision } {
  if (typeof raw !== "object" || raw === null)
    throw new ArgumentError("body", 'must be { "runId", "approvalId" or "callId", "approved": true|false, "by"?, "comment"? }');
  const r = raw as Record<string, unknown>;
  const runId = assertId("runId", r.runId);
  if ((r.approvalId === undefined) === (r.callId === undefined)) throw new ArgumentError("approvalId", "give either approvalId or callId (the tool call's id)");
  let target: ApprovalTarget;
  if (r.callId !== undefined) {
    if (typeof r.callId !== "string" || r.callId.length === 0 || r.callId.length > CALL_ID_MAX)
      throw new ArgumentError("callId", `must be a tool call's id, a string of 1-${CALL_ID_MAX} characters`);
    target = { callId: r.callId };
  } else {
    target = { approvalId: assertId("approvalId", r.approvalId) };
  }
  if (typeof r.approved !== "boolean") throw new ArgumentError("approved", "must be true (approve) or false (reject)");
  const decision: ApprovalDecision = { approved: r.approved };
  if (r.by !== undefined) {
    if (typeof r.by !== "string" || r.by.length === 0 || r.by.length > BY_MAX) throw new ArgumentError("by", `must be a string of 1-${BY_MAX} characters`);
    decision.by = r.by;
  }
  if (r.comment !== undefined) {
    if (typeof r.comment !== "string" || r.comment.length > COMMENT_MAX)
      throw new ArgumentError("comment", `must be a string of at most ${COMMENT_MAX} characters`);
    decision.comment = r.comment;
  }
  return { runId, target, decision };
}

/** Every method that reads a record throws UnsupportedFormatError for one a newer Kova wrote. */
export interface ApprovalStore {
  /** Writes a pending record unless one exists; resolves with the stored one (its deadline wins). */
  request(record: ApprovalRecord): Promise<ApprovalRecord>;
  get(runId: string, approvalId: string): Promise<ApprovalRecord | undefined>;
  /**
   * Decides a pending approval. Repeating the same decision is accepted (a retried request).
   * @throws ApprovalNotFoundError; ApprovalAlreadyDecidedError for a different decision
   */
  decide(runId: string, approvalId: string, decision: ApprovalDecision): Promise<{ record: ApprovalRecord; changed: boolean }>;
  /**
   * The approval id a target names: its own, or that of the run's approval for the tool call.
   * A model may reuse a call id in later responses of a run: then the pending approval is
   * the one, else the one asked last (so a repeated decision is answered as such).
   * @throws ApprovalNotFoundError when the run has no approval for that call
   */
  approvalIdOf(runId: string, target: ApprovalTarget): Promise<string>;
  /**
   * Resolves with the record once it is decided; at `expiresAt` it rejects it as timed out
   * (unless a decision won the race). Aborting `signal` rejects with its reason.
   */
  waitForDecision(runId: string, approvalId: string, signal: AbortSignal): Promise<ApprovalRecord>;
}

/** An approval under its key `<runId>.<approvalId>`; one a newer Kova wrote is refused (deciding it here could drop what that version added). */
export const APPROVAL_FORMAT = recordFormat<ApprovalRecord>({
  describe: (key) => `approval ${key.slice(key.indexOf(".") + 1)} of run ${key.slice(0, key.indexOf("."))}`,
  version: 1,
  readable: [1],
});

export class NatsApprovalStore implements ApprovalStore {
  private constructor(
    readonly store: KvStore<ApprovalRecord>,
    private readonly recheckMs: number,
  ) {}

  /**
   * Opens (creating) the bucket. Records are kept twice the longest timeout, for audit and
   * for a run that resumes late; a record has history 1 (the decision replaces the request).
   * @param recheckMs how often a waiter reads its key besides watching it (a watch can miss
   *   an update across a reconnect; default 5 s)
   * @throws JetStream errors when JetStream is unavailable
   */
  static async open(opts: { js: KvConnection; cluster: string; replicas?: number; recheckMs?: number }): Promise<NatsApprovalStore> {
    const store = await KvStore.open(opts.js, opts.cluster, "approvals", APPROVAL_FORMAT, { replicas: opts.replicas, ttlMs: 2 * MAX_APPROVAL_TIMEOUT_MS });
    return new NatsApprovalStore(store, opts.recheckMs ?? 5_000);
  }

  async request(record: ApprovalRecord): Promise<ApprovalRecord> {
    // Written before a crash (the step runs again): keep that record and its deadline.
    const out = await this.store.change(keyOf(record.runId, record.approvalId), (cur) => (cur ? undefined : record));
    return out?.value ?? record;
  }

  async get(runId: string, approvalId: string): Promise<ApprovalRecord | undefined> {
    return (await this.store.get(keyOf(runId, approvalId)))?.value;
  }

  async decide(runId: string, approvalId: string, decision: ApprovalDecision): Promise<{ record: ApprovalRecord; changed: boolean }> {
    const status: ApprovalStatus = decision.approved ? "approved" : "rejected";
    let changed = false;
    const out = await this.store.change(keyOf(runId, approvalId), (cur) => {
      if (!cur) throw new ApprovalNotFoundError(runId, approvalId);
      changed = cur.value.status === "pending";
      if (!changed) {
        if (cur.value.status === status && !cur.value.timedOut) return undefined;
        throw new ApprovalAlreadyDecidedError(cur.value);
      }
      return {
        ...cur.value,
        status,
        decidedAt: Date.now(),
        ...(decision.by !== undefined ? { by: decision.by } : {}),
        ...(decision.comment !== undefined ? { comment: decision.comment } : {}),
      };
    });
    return { record: out!.value, changed };
  }

  async approvalIdOf(runId: string, target: ApprovalTarget): Promise<string> {
    if ("approvalId" in target) return target.approvalId;
    // A run asks few approvals: its keys (`<runId>.*`) are read in one listing.
    const entries = await this.store.entries({ filter: `${runId}.*`, timeoutMs: 10_000 });
    const asked = [...entries.values()].map((e) => e.value).filter((r) => r.callId === target.callId);
    const pick = asked.find((r) => r.status === "pending") ?? asked.sort((a, b) => b.requestedAt - a.requestedAt)[0];
    if (!pick) throw new ApprovalNotFoundError(runId, target.callId, "callId");
    return pick.approvalId;
  }

  async waitForDecision(runId: string, approvalId: string, signal: AbortSignal): Promise<ApprovalRecord> {
    signal.throwIfAborted();
    let settle: (r: ApprovalRecord | undefined) => void = () => undefined;
    const watch = await this.store.follow(keyOf(runId, approvalId), { onPut: (_key, r) => settle(r) }, silentLogger());
    let timer: NodeJS.Timeout | undefined;
    let recheck: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      return await new Promise<ApprovalRecord>((resolve, reject) => {
        settle = (r) => {
          if (r && r.status !== "pending") resolve(r);
        };
        onAbort = () => reject(signal.reason);
        signal.addEventListener("abort", onAbort, { once: true });
        // Aborted while the watch was being created (an interrupt right after the request
        // went out): a listener added now never fires, so the wait would run to the deadline.
        if (signal.aborted) return onAbort();
        const check = () => this.get(runId, approvalId).then(settle, reject);
        recheck = setInterval(check, this.recheckMs);
        recheck.unref();
        void (async () => {
          const first = await this.get(runId, approvalId);
          if (!first) throw new ApprovalNotFoundError(runId, approvalId);
          settle(first);
          if (first.status !== "pending") return;
          // At the deadline (fixed when the call asked), the waiting node rejects the call,
          // unless someone decided first; then that decision stands.
          timer = setTimeout(() => this.#expire(runId, approvalId).then(resolve, reject), Math.max(0, first.expiresAt - Date.now()));
        })().catch(reject);
      });
    } finally {
      clearTimeout(timer);
      clearInterval(recheck);
      if (onAbort) signal.removeEventListener("abort", onAbort);
      watch.stop();
    }
  }

  async #expire(runId: string, approvalId: string): Promise<ApprovalRecord> {
    const out = await this.store.change(keyOf(runId, approvalId), (cur) => {
      if (!cur) throw new ApprovalNotFoundError(runId, approvalId);
      return cur.value.status !== "pending" ? undefined : { ...cur.value, status: "rejected", decidedAt: Date.now(), timedOut: true };
    });
    return out!.value;
  }
}

function keyOf(runId: string, approvalId: string): string {
  return `${runId}.${approvalId}`;
}
