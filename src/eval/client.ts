import { fromWire, isKovaError, isTimeout, KovaError } from "../core/index.js";
import { controlRequest, createEnvelope, isNoResponders, type Bus, type KovaClient, type KovaEvent, type MessageType } from "../bus/index.js";
import type { RunUsage } from "../agents/index.js";
import { ExperimentNotFoundError, ExperimentStateError } from "./errors.js";
import type { ExperimentSummary } from "./experiment-actor.js";
import { assertExperimentId, evalControlSubject, EvalMessageType, experimentActorId, newExperimentId, ownedExperimentId } from "./protocol.js";
import type { EvalSpecReply } from "./spec-requests.js";
import { ENDED_STATUSES, type StatusRecord } from "./records.js";
import { compareSubjects, summarize, type Comparison, type ExperimentReport } from "./report.js";
import type { ExperimentBudget, ExperimentSpec } from "./spec.js";
import { EvalStore, specParts } from "./store.js";

/**
 * Experiments from code and from the CLI (docs/evals.md, "From code"): everything goes by
 * the public protocol — the spec to the nodes' `kova.<c>.control.eval`, which store it in KV
 * `kova_<c>_evals`, `eval.*` messages to the experiment's actor, its events and records read
 * back (read only: an operator's or a gateway's role in deploy/nats/accounts.conf suffices).
 */

type Client = KovaClient | Bus | { bus: Bus };

function busOf(c: Client): Bus {
  return "bus" in c ? c.bus : c;
}

const stores = new WeakMap<Bus, Promise<EvalStore>>();

/** The cluster's eval bucket through this client, for reading (it is the nodes' to write), opened once. */
export function evalStore(c: Client): Promise<EvalStore> {
  const bus = busOf(c);
  let s = stores.get(bus);
  if (!s) {
    s = EvalStore.reader({ js: bus.js, cluster: bus.cluster });
    s.catch(() => stores.delete(bus));
    stores.set(bus, s);
  }
  return s;
}

export interface StartExperimentOptions {
  /** The experiment id (default `<name>-<8 hex>`; in the owner's scope when there is one). */
  experimentId?: string;
  /**
   * The principal it is started for (`key:<key id>`, `nats:<account>:<user>`): its id then
   * carries that principal's owner scope, and the gateway shows it to that key (and to
   * admins) only. Default: nobody's (the client's id is recorded as who started it).
   */
  owner?: string;
  /** How long to wait for the experiment to accept its start (default 60 s). */
  timeoutMs?: number;
}

/** What `startExperiment` resolves to. */
export interface StartedExperiment {
  experimentId: string;
  summary: ExperimentSummary;
  /**
   * True when the experiment had been started before (this id, this spec: a start sent
   * again, a caller back after a crash, two callers at once): it was not started again, and
   * `summary` is the experiment as it is; follow it (`summary.round`) or read its report.
   */
  existing: boolean;
}

/**
 * Stores the spec and starts the experiment; resolves once its actor accepted the start (it
 * runs on without the caller from then on). Starting an experiment that exists (the same id
 * and the same spec) answers at once with it as it is (`existing`): its actor takes one
 * start, and answers every later one with its progress.
 * @throws KovaError INVALID_CONFIG naming the spec's field when the cluster cannot run it (an
 *   agent, model or tool it does not have); ExperimentStateError when the id is another spec's;
 *   KovaTimeoutError when no node took the start in time
 */
export async function startExperiment(client: Client, spec: ExperimentSpec, opts: StartExperimentOptions = {}): Promise<StartedExperiment> {
  const bus = busOf(client);
  const experimentId = opts.experimentId === undefined ? newExperimentId(spec.name, opts.owner) : ownedExperimentId(opts.experimentId, opts.owner);
  const digest = await storeSpec(bus, experimentId, spec);
  // Each start is a message of its own (a new id): one with the id of an earlier start would be
  // dropped as its duplicate (the mailbox's Nats-Msg-Id window, the actor's processed ids), and
  // its asker would wait for a reply that went to the first. The actor starts the experiment once.
  const env = createEnvelope({
    from: bus.clientId,
    to: experimentActorId(experimentId),
    type: EvalMessageType.start,
    payload: { digest, ...(opts.owner ? { owner: opts.owner } : {}) },
  });
  const reply = await bus.ask<ExperimentSummary & { outcome: string }>(env, { timeoutMs: opts.timeoutMs ?? 60_000 });
  const { outcome, ...summary } = reply.payload;
  if (summary.status === "failed") throw fromWire(summary.error) ?? new KovaError("INTERNAL", `experiment ${experimentId} failed to start`);
  return { experimentId, summary, existing: outcome === "already started" };
}

/** Sends a spec to the nodes in parts (docs/evals.md, "Starting an experiment"); they store it. */
async function storeSpec(bus: Bus, experimentId: string, spec: ExperimentSpec): Promise<string> {
  const subject = evalControlSubject(bus.cluster);
  const { head, chunks } = specParts(experimentId, spec);
  await Promise.all(
    chunks.map((tasks, index) => controlRequest<EvalSpecReply>(bus.nc, subject, { op: "tasks", experimentId, digest: head.digest, index, tasks }, 30_000)),
  );
  await controlRequest<EvalSpecReply>(bus.nc, subject, { op: "spec", experimentId, head }, 30_000);
  return head.digest;
}

/** Progress of a running experiment, from one of its events. */
export interface ExperimentProgress {
  experimentId: string;
  /** `eval_started`, `eval_attempt`, `eval_resumed` or `eval_ended`. */
  type: string;
  /** Cells with a result, cells in error, all cells. */
  done: number;
  errors: number;
  total: number;
  /** Tokens and cost so far, subjects and judges together. */
  spent: RunUsage;
  /** Since the current run began (start or resume). */
  elapsedMs: number;
  /** Time left at the pace so far; undefined before the first cell. */
  etaMs?: number;
  /** The event itself (an attempt's cell, subject, status and score are in its data). */
  event: KovaEvent;
}

function progressOf(e: KovaEvent, last: ExperimentProgress | undefined, base: { done: number; errors: number; since?: number }): ExperimentProgress {
  const d = (e.data ?? {}) as Record<string, unknown>;
  const num = (v: unknown, dflt: number) => (typeof v === "number" ? v : dflt);
  const done = num(d.done, last?.done ?? 0);
  const errors = num(d.errors, last?.errors ?? 0);
  const total = num(d.total ?? d.cells, last?.total ?? 0);
  const since = num(d.runningSince ?? d.startedAt, base.since ?? e.ts);
  const elapsedMs = Math.max(0, e.ts - since);
  const finishedThisRun = done + errors - base.done - base.errors;
  const left = total - done - errors;
  return {
    experimentId: String(d.experimentId ?? e.runId),
    type: e.type,
    done,
    errors,
    total,
    spent: (d.spent as RunUsage | undefined) ?? last?.spent ?? { inputTokens: 0, outputTokens: 0 },
    elapsedMs,
    ...(finishedThisRun > 0 && e.type === "eval_attempt" ? { etaMs: Math.round((elapsedMs / finishedThisRun) * left) } : {}),
    event: e,
  };
}

export interface FollowOptions {
  /** Stop following (the experiment runs on). */
  signal?: AbortSignal;
  /** Follow until the end of this run of the experiment (1: the start; each resume adds one). Default: the current one. */
  round?: number;
}

/**
 * Streams an experiment's progress, from its first event (stored, so nothing is missed) to
 * the end of its current run.
 * @throws ExperimentNotFoundError when the cluster has no such experiment
 */
export async function* followExperiment(client: Client, experimentId: string, opts: FollowOptions = {}): AsyncGenerator<ExperimentProgress> {
  const bus = busOf(client);
  assertExperimentId(experimentId);
  const round = opts.round ?? (await currentRound(bus, experimentId));
  const reader = await bus.readStoredEvents(bus.subjects.events(experimentId, experimentId));
  const stop = () => reader.close();
  opts.signal?.addEventListener("abort", stop, { once: true });
  let last: ExperimentProgress | undefined;
  let base = { done: 0, errors: 0, since: undefined as number | undefined };
  try {
    for await (const m of reader.messages) {
      let e: KovaEvent;
      try {
        e = m.json<KovaEvent>();
      } catch {
        continue;
      }
      const d = (e.data ?? {}) as Record<string, unknown>;
      const r = typeof d.round === "number" ? d.round : 1;
      if (e.type === "eval_started" || e.type === "eval_resumed") base = { done: Number(d.done ?? 0), errors: Number(d.errors ?? 0), since: e.ts };
      if (e.type === "run_stream_end") {
        if (r >= round) return;
        continue;
      }
      last = progressOf(e, last, base);
      yield last;
    }
  } finally {
    opts.signal?.removeEventListener("abort", stop);
    reader.close();
  }
}

async function currentRound(bus: Bus, experimentId: string): Promise<number> {
  return (await readExperimentSummary(bus, experimentId)).round;
}

export interface RunExperimentOptions extends StartExperimentOptions {
  /** Each progress event of the run, as it comes. */
  onProgress?: (p: ExperimentProgress) => void;
  signal?: AbortSignal;
}

/**
 * Runs an experiment to its end and returns its report: `kova eval run` from code. For an
 * experiment that exists (the same id and spec, see startExperiment) it follows the run in
 * progress, or reads the report of the one that ended.
 * @throws what startExperiment throws
 */
export async function runExperiment(client: Client, spec: ExperimentSpec, opts: RunExperimentOptions = {}): Promise<ExperimentReport> {
  const { experimentId, summary } = await startExperiment(client, spec, opts);
  // An experiment that had ended (started before) has nothing more to follow.
  if (!ENDED_STATUSES.includes(summary.status)) {
    for await (const p of followExperiment(client, experimentId, { round: summary.round, ...(opts.signal ? { signal: opts.signal } : {}) }))
      opts.onProgress?.(p);
  }
  return readReport(client, experimentId);
}

/**
 * An experiment's progress: from its actor while it is hosted, else from its status record.
 * @throws ExperimentNotFoundError
 */
export async function readExperimentSummary(client: Client, experimentId: string): Promise<ExperimentSummary> {
  const bus = busOf(client);
  assertExperimentId(experimentId);
  const status = await (await evalStore(bus)).getStatus(experimentId);
  if (!status) throw new ExperimentNotFoundError(experimentId, bus.cluster);
  if (!ENDED_STATUSES.includes(status.status)) {
    try {
      return await bus.request<ExperimentSummary>(experimentActorId(experimentId), "info_request", {}, { timeoutMs: 2000 });
    } catch (err) {
      // Passivated or between nodes: the status record says as much as is known.
      if (!isNoResponders(err) && !isTimeout(err) && !isKovaError(err, "NOT_HOSTED")) throw err;
    }
  }
  return {
    experimentId,
    status: status.status,
    cells: status.cells,
    done: 0,
    errors: 0,
    inFlight: 0,
    spent: { inputTokens: 0, outputTokens: 0 },
    judgeSpent: { inputTokens: 0, outputTokens: 0 },
    budget: status.budget,
    round: status.round ?? 1,
    ...(status.startedAt === undefined ? {} : { startedAt: status.startedAt }),
    ...(status.endedAt === undefined ? {} : { endedAt: status.endedAt }),
    ...(status.stopReason ? { stopReason: status.stopReason } : {}),
  };
}

/**
 * The report of an experiment, from its records (running or ended).
 * @throws ExperimentNotFoundError
 */
export async function readReport(client: Client, experimentId: string): Promise<ExperimentReport> {
  const bus = busOf(client);
  assertExperimentId(experimentId);
  const store = await evalStore(bus);
  const [stored, status, records] = await Promise.all([store.getSpec(experimentId), store.getStatus(experimentId), store.attempts(experimentId)]);
  if (!stored) throw new ExperimentNotFoundError(experimentId, bus.cluster);
  return summarize(experimentId, stored.spec, records, status);
}

/** Every experiment of the cluster, newest first. */
export async function listExperiments(client: Client): Promise<StatusRecord[]> {
  return (await evalStore(client)).statuses();
}

async function control(client: Client, experimentId: string, type: MessageType, payload: unknown): Promise<ExperimentSummary & { outcome: string }> {
  const bus = busOf(client);
  assertExperimentId(experimentId);
  const status = await (await evalStore(bus)).getStatus(experimentId);
  if (!status) throw new ExperimentNotFoundError(experimentId, bus.cluster);
  const env = createEnvelope({ from: bus.clientId, to: experimentActorId(experimentId), type, payload });
  return (await bus.ask<ExperimentSummary & { outcome: string }>(env, { timeoutMs: 60_000 })).payload;
}

/**
 * Cancels a running experiment: the cells in flight are interrupted; what finished stays.
 * @throws ExperimentNotFoundError; ExperimentStateError when it is not running
 */
export async function cancelExperiment(client: Client, experimentId: string, reason?: string): Promise<ExperimentSummary> {
  const r = await control(client, experimentId, EvalMessageType.cancel, reason ? { reason } : {});
  if (r.outcome !== "cancelled") throw new ExperimentStateError(experimentId, r.status, "only a running experiment can be cancelled");
  return r;
}

/**
 * Continues a stopped experiment (cancelled, or at its budget), with a new budget if given.
 * @returns the summary, with the run's `round` to follow
 * @throws ExperimentNotFoundError; ExperimentStateError when it is not stopped
 */
export async function resumeExperiment(client: Client, experimentId: string, budget?: ExperimentBudget): Promise<ExperimentSummary> {
  const r = await control(client, experimentId, EvalMessageType.resume, budget ? { budget } : {});
  if (r.outcome !== "resumed")
    throw new ExperimentStateError(experimentId, r.status, "only a cancelled experiment or one stopped at its budget can be resumed");
  return r;
}

/** `<experiment>[:<subject>]`: one side of `kova eval compare`. */
export async function compareExperiments(
  client: Client,
  a: { experimentId: string; subject?: string },
  b: { experimentId: string; subject?: string },
): Promise<Comparison> {
  const store = await evalStore(client);
  const side = async (x: { experimentId: string; subject?: string }, which: string) => {
    assertExperimentId(x.experimentId);
    const stored = await store.getSpec(x.experimentId);
    if (!stored) throw new ExperimentNotFoundError(x.experimentId, busOf(client).cluster);
    const ids = stored.spec.subjects.map((s) => s.id);
    const subject = x.subject ?? (ids.length === 1 ? ids[0]! : undefined);
    if (subject === undefined || !ids.includes(subject)) {
      throw new KovaError(
        "INVALID_ARGUMENT",
        `${which}: ${subject === undefined ? `experiment ${x.experimentId} has ${ids.length} subjects: name one as ${x.experimentId}:<subject>` : `experiment ${x.experimentId} has no subject ${subject}`} (it has ${ids.join(", ")})`,
      );
    }
    return { experimentId: x.experimentId, subject, records: await store.attempts(x.experimentId) };
  };
  return compareSubjects(await side(a, "A"), await side(b, "B"));
}
