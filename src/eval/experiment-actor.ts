import { componentLogger, isValidId, KovaError, silentLogger, sleep, toWire, type Logger, type WireError } from "../core/index.js";
import type { Bus } from "../bus/index.js";
import { delegateTask } from "../agents/index.js";
import { defineActor, type ActorContext, type ActorDefinition } from "../actors/index.js";
import type { WorkflowTimers } from "../workflow/index.js";
import { WorkflowMessageType } from "../workflow/index.js";
import { checkSpecOnCluster } from "./check.js";
import { EvalErrorCode } from "./errors.js";
import {
  classifyAnswer,
  emptyExperimentState,
  EXPERIMENT_STATE_VERSION,
  ExperimentEngine,
  PLAIN_STATE_VERSION,
  readExperimentState,
  type Effect,
  type ExperimentState,
} from "./engine.js";
import type { EvalTrust } from "./node-trust.js";
import { EvalMessageType, EXPERIMENT_TEMPLATE, experimentOfActor, experimentOwnerProblem } from "./protocol.js";
import { readAttemptRecord, STATUS_RECORD_VERSION, type AttemptRecord, type StatusRecord } from "./records.js";
import type { SpecCache } from "./spec-cache.js";
import { agentsNamed, cellRef, type ExperimentBudget, type ExperimentSpec, type VerifierSpec } from "./spec.js";
import type { EvalStore } from "./store.js";
import type { EvalAgentsPort } from "./subject-actor.js";
import { runCodeVerifier, type Verdict } from "./verifiers.js";

export interface ExperimentActorPorts {
  bus: () => Bus;
  store: () => Promise<EvalStore>;
  specs: SpecCache;
  agents: EvalAgentsPort;
  /** What this node lets experiments use of its own (kova.toml `[eval]`): code verifiers' directories, external subjects' keys. */
  trust: EvalTrust;
  /** The cluster's durable timers (the workflow timers bucket): the experiment's watchdog. */
  timers: () => Promise<WorkflowTimers>;
  /** Interrupts a delegated turn wherever its actor is hosted (a timed-out or cut attempt). */
  interrupt?: (agentId: string, messageId: string) => Promise<boolean>;
  logger?: Logger;
}

/** What `info_request` answers and every control message replies: the experiment's progress. */
export interface ExperimentSummary {
  experimentId: string;
  status: ExperimentState["status"];
  cells: number;
  done: number;
  errors: number;
  inFlight: number;
  spent: ExperimentState["spent"];
  judgeSpent: ExperimentState["judgeSpent"];
  budget: ExperimentBudget;
  /** Runs so far (1 after the start, one more per resume): what `followExperiment` follows to its end. */
  round: number;
  startedAt?: number;
  runningSince?: number;
  endedAt?: number;
  stopReason?: { code: string; message: string };
  error?: WireError;
}

export function experimentSummary(s: ExperimentState): ExperimentSummary {
  return {
    experimentId: s.experimentId,
    status: s.status,
    cells: s.cells,
    done: s.done,
    errors: s.errors,
    inFlight: Object.keys(s.inflight).length,
    spent: s.spent,
    judgeSpent: s.judgeSpent,
    budget: s.budget,
    round: s.round,
    ...(s.startedAt === undefined ? {} : { startedAt: s.startedAt }),
    ...(s.runningSince === undefined ? {} : { runningSince: s.runningSince }),
    ...(s.endedAt === undefined ? {} : { endedAt: s.endedAt }),
    ...(s.stopReason ? { stopReason: s.stopReason } : {}),
    ...(s.error ? { error: s.error } : {}),
  };
}

type Ctx = ActorContext<ExperimentState>;

/** When a subject's runner ended the run, as its answer says (`at`, epoch ms), if it does. */
function answerTime(payload: unknown): number | undefined {
  const at = field(payload, "at");
  return typeof at === "number" && Number.isFinite(at) && at > 0 ? at : undefined;
}

function field(payload: unknown, name: string): unknown {
  return typeof payload === "object" && payload !== null ? (payload as Record<string, unknown>)[name] : undefined;
}

/**
 * The `eval` actor type (docs/evals.md, "Execution"): an experiment is its instance
 * `eval--<experiment id>`. Each message is one turn: the engine applies it to the state
 * (the checkpoint) and the turn performs the engine's effects in one journaled step keyed by
 * derived ids. Register it (and the template of the same name) on every node; a KovaNode does.
 */
export function evalExperimentActor(ports: ExperimentActorPorts): ActorDefinition<ExperimentState> {
  const landing: Landing = new Map();
  const log = componentLogger(ports.logger ?? silentLogger(), "eval");
  /**
   * Runs one turn: `apply` changes the state through the engine, then the effects go out.
   * `at` is the turn's time when the message brings one (an answer's, a timer's due time):
   * a turn that reads no clock writes its record once less (docs/actors.md).
   */
  const turn = async (ctx: Ctx, apply: (engine: ExperimentEngine, spec: ExperimentSpec) => Promise<unknown>, at?: number): Promise<unknown> => {
    const s = ctx.state;
    if (s.status === "new") return { outcome: "not started", ...experimentSummary(s) };
    const { spec } = await ports.specs.get(s.experimentId);
    const engine = new ExperimentEngine(s, spec, at ?? ctx.now());
    const outcome = await apply(engine, spec);
    engine.advance();
    await perform(ctx, engine, spec, ports, landing, log);
    return { outcome, ...experimentSummary(s) };
  };

  const start = async (ctx: Ctx): Promise<unknown> => {
    const s = ctx.state;
    if (s.status !== "new") return { outcome: "already started", ...experimentSummary(s) };
    const digest = String(field(ctx.message.payload, "digest") ?? "");
    const ownerField = field(ctx.message.payload, "owner");
    // The principal it was started for (`key:<id>`, `nats:<account>:<user>`: the id carries its scope), else who started it.
    const principal = typeof ownerField === "string" && /^[\x21-\x7e]{1,200}$/.test(ownerField) ? ownerField : undefined;
    const owner = principal ?? (isValidId(ctx.message.from) ? ctx.message.from : undefined);
    // What this node says about the spec is journaled: a replay elsewhere decides the same.
    const check = await ctx.step(
      "check",
      async (): Promise<{ ok: true } | { ok: false; error: WireError }> => {
        try {
          const problem = experimentOwnerProblem(s.experimentId, principal);
          if (problem) throw new KovaError(EvalErrorCode.EXPERIMENT_STATE, problem, { data: { experimentId: s.experimentId, owner: principal ?? null } });
          const stored = await ports.specs.get(s.experimentId);
          if (digest && stored.digest !== digest) {
            throw new KovaError(
              EvalErrorCode.EXPERIMENT_STATE,
              `the stored spec (digest ${stored.digest.slice(0, 12)}…) is not the one started (${digest.slice(0, 12)}…): start the experiment again`,
              { data: { stored: stored.digest, started: digest } },
            );
          }
          await checkSpecOnCluster(stored.spec, { agents: ports.agents, bus: ports.bus(), trust: ports.trust });
          return { ok: true };
        } catch (err) {
          return { ok: false, error: toWire(err) };
        }
      },
      { idempotent: true },
    );
    s.createdAt = ctx.now();
    if (!check.ok) {
      const spec = await ports.specs.get(s.experimentId).then(
        (x) => x.spec,
        () => undefined,
      );
      const engine = new ExperimentEngine(s, spec ?? ({} as ExperimentSpec), ctx.now());
      engine.reject(digest, check.error, owner);
      await perform(ctx, engine, spec, ports, landing, log);
      return { outcome: "rejected", ...experimentSummary(s) };
    }
    const { spec, digest: stored } = await ports.specs.get(s.experimentId);
    const engine = new ExperimentEngine(s, spec, ctx.now());
    engine.start(stored, owner);
    engine.advance();
    await perform(ctx, engine, spec, ports, landing, log);
    return { outcome: "started", ...experimentSummary(s) };
  };

  const result = (ctx: Ctx) =>
    turn(
      ctx,
      async (engine, spec) => {
        const f = engine.inFlight(ctx.message.correlationId);
        if (!f) return "ignored";
        const answer = { payload: ctx.message.payload, ...(ctx.message.error ? { error: ctx.message.error } : {}) };
        const extra: { codeVerdicts?: Verdict[]; pending?: AttemptRecord } = {};
        if (f.phase === "subject") {
          const o = classifyAnswer(answer);
          const code = spec.verifiers.filter((v): v is Extract<VerifierSpec, { type: "code" }> => v.type === "code");
          if (o.kind === "completed" && code.length > 0) {
            const ref = cellRef(spec, f.cell);
            extra.codeVerdicts = await ctx.step(
              `verify:${f.messageId}`,
              () => Promise.all(code.map((v) => runCodeVerifier(v, o.output, spec.tasks[ref.task]!, spec.subjects[ref.subject]!, ports.trust))),
              { idempotent: true },
            );
          }
        } else {
          const pending = await readPending(ctx, ports, spec, [f.cell], `pending:${f.messageId}`);
          if (pending[0]) extra.pending = pending[0];
        }
        return engine.result(ctx.message.correlationId, answer, extra) ? "accepted" : "ignored";
      },
      answerTime(ctx.message.payload),
    );

  const timer = (ctx: Ctx) =>
    turn(
      ctx,
      async (engine, spec) => {
        const timerId = String(field(ctx.message.payload, "timerId") ?? "");
        const overdue = engine.overdueJudges().map((f) => f.cell);
        const pending = overdue.length > 0 ? await readPending(ctx, ports, spec, overdue, `pending:${timerId}`) : [];
        return engine.timerFired(timerId, new Map(pending.map((r) => [r.cell, r]))) ? "fired" : "ignored";
      },
      ctx.state.timer?.id === field(ctx.message.payload, "timerId") ? ctx.state.timer?.due : undefined,
    );

  return defineActor<ExperimentState>({
    type: EXPERIMENT_TEMPLATE,
    capabilities: [],
    initialState: (binding) => emptyExperimentState(binding?.key ?? "", 0),
    handlers: {
      [EvalMessageType.start]: (ctx) => {
        if (!ctx.state.experimentId) ctx.state.experimentId = experimentOfActor(ctx.actorId) ?? ctx.actorId;
        return start(ctx);
      },
      result_notify: result,
      [WorkflowMessageType.timer]: timer,
      [EvalMessageType.cancel]: (ctx) =>
        turn(ctx, async (engine) => {
          const reason = field(ctx.message.payload, "reason");
          return engine.cancel(typeof reason === "string" ? reason : undefined, ctx.message.from) ? "cancelled" : "not running";
        }),
      [EvalMessageType.resume]: (ctx) =>
        turn(ctx, async (engine) => {
          const budget = field(ctx.message.payload, "budget") as ExperimentBudget | undefined;
          return engine.resume(budget && typeof budget === "object" ? budget : undefined) ? "resumed" : "not stopped";
        }),
    },
    rpc: { info_request: (_env, state) => experimentSummary(readExperimentState("experiment", state)) },
    // A subject's answer to a cell in flight, with its runner's time: the turn reads no
    // clock and its effects are one unrecorded step keyed by the cell's ids, so it replays
    // from the checkpoint and the answer and needs no WAL record (docs/evals.md,
    // "Execution"). Not with code verifiers (their verdicts are a recorded step), nor a
    // judge's answer (it reads the record waiting for it, which the turn then overwrites).
    unrecorded: (env, state) => {
      if (env.type !== "result_notify" || answerTime(env.payload) === undefined || env.correlationId === undefined) return false;
      const f = Object.values(state.inflight ?? {}).find((x) => x.messageId === env.correlationId);
      if (f?.phase !== "subject" || state.status !== "running") return false;
      const spec = ports.specs.peek(state.experimentId);
      return spec !== undefined && !spec.verifiers.some((v) => v.type === "code");
    },
  });
}

/** The records in progress (waiting for a judge) of some cells, read in a journaled step. */
async function readPending(ctx: Ctx, ports: ExperimentActorPorts, spec: ExperimentSpec, cells: number[], name: string): Promise<AttemptRecord[]> {
  const s = ctx.state;
  const raw = await ctx.step(
    name,
    async () => {
      const store = await ports.store();
      const found = await Promise.all(
        cells.map((cell) => {
          const f = s.inflight[String(cell)]!;
          const ref = cellRef(spec, cell);
          return store.getAttempt({
            experimentId: s.experimentId,
            subject: spec.subjects[ref.subject]!.id,
            task: spec.tasks[ref.task]!.id,
            repetition: ref.repetition,
            attempt: f.attempt,
          });
        }),
      );
      return found.filter((r): r is AttemptRecord => r !== undefined && r.status === "judging");
    },
    { idempotent: true },
  );
  return raw.map((r) => readAttemptRecord(`${s.experimentId}.${r.cell}`, r));
}

function statusRecord(s: ExperimentState, spec: ExperimentSpec | undefined): StatusRecord {
  return {
    v: STATUS_RECORD_VERSION,
    experimentId: s.experimentId,
    name: spec?.name ?? s.experimentId.replace(/-[0-9a-f]{8}$/, ""),
    ...(spec?.description ? { description: spec.description } : {}),
    status: s.status,
    cells: s.cells,
    subjects: spec?.subjects.map((x) => x.id) ?? [],
    agents: spec ? agentsNamed(spec) : [],
    tasks: spec?.tasks.length ?? 0,
    repetitions: spec?.repetitions ?? 0,
    budget: s.budget,
    round: s.round,
    ...(s.owner ? { owner: s.owner } : {}),
    digest: s.digest,
    createdAt: s.createdAt,
    ...(s.startedAt === undefined ? {} : { startedAt: s.startedAt }),
    ...(s.endedAt === undefined ? {} : { endedAt: s.endedAt }),
    ...(s.stopReason ? { stopReason: s.stopReason } : {}),
  };
}

/**
 * The effects an experiment's last turn left to land after its checkpoint, on this node,
 * by actor id: that turn's message id, and whether they all landed (after their retries).
 */
type Landing = Map<string, { of: string; landed: Promise<boolean> }>;

/** Larger outboxes are not carried in the checkpoint: the turn performs its effects before it. */
const OUTBOX_MAX_CHARS = 64 * 1024;
/** Waits before the tries of effects left to land (each try performs them all again: they are keyed). */
const OUTBOX_RETRY_MS = [200, 1_000, 5_000];

/**
 * Whether a turn's effects may land after its checkpoint: only finished attempts' records,
 * delegations and progress events. A record waiting for its judge is read back by a later
 * turn, the status and the end events come after every record, and a timer, a clear or an
 * interrupt steers what follows: those turns perform their effects before the checkpoint.
 */
function deferrable(effects: readonly Effect[]): boolean {
  const kinds = effects.every(
    (e) => e.kind === "send" || (e.kind === "record" && e.record.status !== "judging") || (e.kind === "event" && e.type === "eval_attempt"),
  );
  return kinds && JSON.stringify(effects).length <= OUTBOX_MAX_CHARS;
}

/**
 * Performs a turn's effects, all in one step. Every effect is keyed by an id derived from the
 * experiment, the cell and the attempt (a message id, a KV key, an event's message id, a
 * timer id), so a replay of the turn performs them again without repeating any: the step is
 * not recorded (one journal write less per turn). A delegation sent and interrupted in the
 * same turn (the budget ran out as it was sent) is neither.
 *
 * A turn whose effects are only finished records, delegations and progress events
 * (`deferrable`) does not wait for them: they go out before its checkpoint and land after
 * it, carried in the state (`outbox`) until the next turn with effects, which first waits
 * for them where they were sent (or performs them again on another host, or after they
 * failed), so every effect still lands before the effects of the turns after it, and the
 * experiment's serial path loses a round trip per answer (docs/evals.md, "Execution").
 */
async function perform(
  ctx: Ctx,
  engine: ExperimentEngine,
  spec: ExperimentSpec | undefined,
  ports: ExperimentActorPorts,
  landing: Landing,
  log: Logger,
): Promise<void> {
  const effects = engine.effects.splice(0);
  if (effects.length === 0) return;
  const s = ctx.state;
  const previous = s.outbox;
  const later = deferrable(effects);
  if (later) {
    s.outbox = { of: ctx.message.id, effects };
    s.v = EXPERIMENT_STATE_VERSION;
  } else {
    delete s.outbox;
    s.v = PLAIN_STATE_VERSION;
  }
  const status = effects.some((e) => e.kind === "status") ? statusRecord(s, spec) : undefined;
  await ctx.step(
    "effects",
    async () => {
      if (previous) {
        const sent = landing.get(ctx.actorId);
        if (!(sent?.of === previous.of && (await sent.landed))) await performNow(ctx, previous.effects, engine.now, undefined, ports);
      }
      if (!later) {
        landing.delete(ctx.actorId);
        await performNow(ctx, effects, engine.now, status, ports);
        return true;
      }
      const landed = (async () => {
        for (let attempt = 0; ; attempt++) {
          try {
            await performNow(ctx, effects, engine.now, undefined, ports);
            return true;
          } catch (err) {
            if (attempt >= OUTBOX_RETRY_MS.length) {
              // The next turn with effects performs them again before its own.
              log.warn({ err, experimentId: s.experimentId }, "effects of an experiment's turn did not land; its next turn sends them again");
              return false;
            }
            await sleep(OUTBOX_RETRY_MS[attempt]!);
          }
        }
      })();
      landing.set(ctx.actorId, { of: ctx.message.id, landed });
      return true;
    },
    { idempotent: true, record: false },
  );
}

/** Performs effects and waits for every one of them (the status record and the end events last). */
async function performNow(ctx: Ctx, effects: readonly Effect[], now: number, status: StatusRecord | undefined, ports: ExperimentActorPorts): Promise<void> {
  const s = ctx.state;
  const interrupted = new Set(effects.filter((e) => e.kind === "interrupt").map((e) => (e as Extract<Effect, { kind: "interrupt" }>).messageId));
  const sent = new Set(effects.filter((e) => e.kind === "send").map((e) => (e as Extract<Effect, { kind: "send" }>).id));
  // The last record of each attempt wins (an answer waiting for its judge, then cut by the budget).
  const records = new Map<string, AttemptRecord>();
  for (const e of effects) if (e.kind === "record") records.set(`${e.record.cell}.${e.record.attempt}`, e.record);
  const bus = ports.bus();
  const store = await ports.store();
  const inbox = bus.subjects.a2a(ctx.actorId);
  const work: Array<Promise<unknown>> = [...[...records.values()].map((r) => store.putAttempt(r))];
  const publish = (e: Extract<Effect, { kind: "event" }>) =>
    bus.publishEvent(
      { type: e.type, sessionId: s.experimentId, runId: s.experimentId, ts: now, data: e.data },
      { msgId: `${s.experimentId}-${e.type}-${e.key}` },
    );
  // The end events go last: whoever they wake (a follower that then reads the report) finds every record and the status written.
  const last: Array<Extract<Effect, { kind: "event" }>> = [];
  for (const e of effects) {
    switch (e.kind) {
      case "send":
        if (interrupted.has(e.id)) break;
        work.push(
          delegateTask(bus, {
            id: e.id,
            from: ctx.actorId,
            to: e.to,
            input: e.input,
            runId: e.id,
            sessionId: s.experimentId,
            parentRunId: s.experimentId,
            replyTo: inbox,
          }),
        );
        break;
      case "event":
        if (e.type === "eval_ended" || e.type === "run_stream_end") last.push(e);
        else work.push(publish(e));
        break;
      case "timer":
        work.push(ports.timers().then((t) => t.set({ runId: ctx.actorId, timerId: e.timerId, due: e.due })));
        break;
      case "clear_timers":
        work.push(ports.timers().then((t) => t.clear(ctx.actorId)));
        break;
      case "interrupt":
        if (!sent.has(e.messageId) && ports.interrupt) work.push(ports.interrupt(e.to, e.messageId));
        break;
      default:
        break;
    }
  }
  await Promise.all(work);
  if (status) await store.putStatus(status);
  for (const e of last) await publish(e);
}
