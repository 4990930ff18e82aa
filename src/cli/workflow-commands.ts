import type { Command } from "commander";
import { ArgumentError, ErrorCode, KovaError, isKovaError, isValidId } from "../core/index.js";
import { type KovaClient, isNoResponders, type KovaEvent } from "../bus/index.js";
import { NatsCheckpointStore } from "../actors/index.js";
import { controlRequest, spawnSubject, type SpawnReply, readRegistry } from "../cluster/index.js";
import {
  assertRunId,
  checkInput,
  loadWorkflowFile,
  newRunId,
  readRunState,
  runSummary,
  WORKFLOW_ACTOR_TYPE,
  WorkflowErrorCode,
  WorkflowMessageType,
  type RunSummary,
} from "../workflow/index.js";
import { print, table } from "./output.js";
import { LiveRunTree } from "./run-tree.js";
import { targetOptions, type TargetOpts } from "./target.js";
import { withClient } from "./bus-commands.js";

export { withClient };

/**
 * `kova workflow run|status|cancel|ls|signal`: workflow runs from the command line
 * (docs/workflows.md); `kova approve|reject` (approval-commands.ts) decide their approval waits too. A run is started by declaring its actor
 * (`spawn`, type `workflow`, id = run id) and sending it `workflow.start` with the
 * workflow as written in the file; everything else is a message to the run's inbox or a
 * read of its state.
 */

/** `--input k=v` (repeatable) and `--input '{json}'` into one object. */
export function parseInputs(values: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const v of values) {
    if (v.trimStart().startsWith("{")) {
      try {
        Object.assign(out, JSON.parse(v) as object);
      } catch (err) {
        throw new ArgumentError("--input", `is not a JSON object (${(err as Error).message}): pass --input '{"topic":"nats"}' or --input topic=nats`);
      }
      continue;
    }
    const eq = v.indexOf("=");
    if (eq <= 0) throw new ArgumentError("--input", `${JSON.stringify(v)}: use name=value (repeat --input for more) or a JSON object`);
    out[v.slice(0, eq)] = v.slice(eq + 1);
  }
  return out;
}

/** What `startRun` resolves to. */
export interface StartedRun {
  runId: string;
  /** The run's session: the one asked for, or for a run that existed, the one it has. */
  sessionId: string;
  /**
   * True when the run had been started before (this id: a start sent again, a caller back
   * after a crash, two callers at once): it was not started again, and `run` is the run as
   * it is; follow it or read how it ended.
   */
  existing: boolean;
  /** The run's summary once its actor took the start. */
  run: RunSummary;
}

const ENDED: readonly string[] = ["completed", "failed", "cancelled"];

/** Whether a run's status is an end state. */
export function runEnded(run: RunSummary): boolean {
  return ENDED.includes(run.status);
}

/**
 * Starts a run: declares its actor, then asks it `workflow.start` (durable: the run starts
 * even if its node is still being chosen), and resolves once the run took it. Starting a
 * run that exists answers at once with it as it is (`existing`): the run starts once.
 * @throws what spawn or ask throw (no node answers, quota exceeded, KovaTimeoutError when
 *   no node took the start in time)
 */
export async function startRun(
  client: KovaClient,
  opts: { raw: unknown; input: Record<string, unknown>; runId?: string; sessionId?: string; parentRunId?: string; timeoutMs?: number },
): Promise<StartedRun> {
  const runId = opts.runId === undefined ? newRunId() : assertRunId(opts.runId);
  const sessionId = opts.sessionId ?? runId;
  // A run that ended is retired (placement never hosts it again): nothing would answer a start,
  // so its checkpoint answers. Read before the spawn, which must not declare it again.
  const ended = async (): Promise<StartedRun | undefined> => {
    const saved = opts.runId === undefined ? undefined : await checkpointedRun(client, runId);
    return saved && runEnded(saved) ? { runId, sessionId: saved.sessionId, existing: true, run: saved } : undefined;
  };
  const before = await ended();
  if (before) return before;
  await controlRequest<SpawnReply>(client.bus.nc, spawnSubject(client.bus.cluster), { id: runId, type: WORKFLOW_ACTOR_TYPE });
  // Each start is a message of its own (a new id): one with the id of an earlier start would be
  // dropped as its duplicate (the mailbox's Nats-Msg-Id window, the actor's processed ids), and
  // its asker would wait for a reply that went to the first. The run starts once.
  let reply: { payload: { outcome?: unknown; run: RunSummary } };
  try {
    reply = await client.ask<{ outcome?: unknown; run: RunSummary }>(
      runId,
      WorkflowMessageType.start,
      { workflow: opts.raw, input: opts.input, sessionId, ...(opts.parentRunId ? { parentRunId: opts.parentRunId } : {}) },
      { timeoutMs: opts.timeoutMs ?? 60_000 },
    );
  } catch (err) {
    // The run ended and was retired between the read above and this start.
    const after = isKovaError(err, ErrorCode.TIMEOUT) ? await ended() : undefined;
    if (after) return after;
    throw err;
  }
  const { outcome, run } = reply.payload;
  return { runId, sessionId: run.sessionId || sessionId, existing: outcome === "already started", run };
}

/** The run as its checkpoint has it; undefined when it has none (not started yet, or no such run). */
async function checkpointedRun(client: KovaClient, runId: string): Promise<RunSummary | undefined> {
  const store = await NatsCheckpointStore.open({ js: client.bus.js, cluster: client.bus.cluster });
  const cp = await store.load(runId);
  const state = cp?.state === undefined ? undefined : readRunState(runId, cp.state);
  return state?.runId ? runSummary(state) : undefined;
}

/**
 * A run's summary: from its actor while it is hosted, else from its checkpoint (a run
 * that ended is retired from placement, its state stays in KV).
 * @throws KovaError RUN_NOT_FOUND when the cluster has no run of that id
 */
export async function readRun(client: KovaClient, runId: string): Promise<RunSummary> {
  assertRunId(runId);
  try {
    return await client.request<RunSummary>(runId, "info_request", {}, { timeoutMs: 2000 });
  } catch (err) {
    if (!isNoResponders(err) && !(err instanceof KovaError && err.code === "TIMEOUT")) throw err;
  }
  const saved = await checkpointedRun(client, runId);
  if (!saved)
    throw new KovaError(
      WorkflowErrorCode.RUN_NOT_FOUND,
      `no workflow run ${runId} in cluster ${client.bus.cluster} (or it has not started yet): see kova workflow ls`,
    );
  return saved;
}

/** One line per progress event of a run, for `--follow`. */
export function progressLine(e: KovaEvent): string | undefined {
  const d = (e.data ?? {}) as Record<string, unknown>;
  const err = (x: unknown) => (x as { message?: string } | undefined)?.message ?? "";
  switch (e.type) {
    case "run_started":
      return `run ${e.runId} started (${String(d.agentId)})`;
    case "step_started":
      return `  ${String(d.key)}: started${Number(d.attempt) > 1 ? ` (attempt ${String(d.attempt)})` : ""}`;
    case "child_run_linked":
      return `  ${String(d.key)}: asked ${String(d.agentId)} (child run ${String(d.childRunId)})`;
    case "step_completed":
      return `  ${String(d.key)}: completed in ${(Number(d.durationMs) / 1000).toFixed(1)}s${d.fallback ? " (by its fallback)" : ""}`;
    case "step_retry":
      return `  ${String(d.key)}: attempt ${String(d.attempt)} failed (${err(d.error)}); retrying in ${String(d.delayMs)} ms`;
    case "step_skipped":
      return `  ${String(d.key)}: skipped after a failure (${err(d.error)})`;
    case "step_fallback":
      return `  ${String(d.key)}: failed (${err(d.error)}); running its fallback ${String(d.fallback)}`;
    case "step_failed":
      return `  ${String(d.key)}: failed (${err(d.error)})`;
    case "branch_taken":
      return `  ${String(d.key)}: took ${String(d.arm)}`;
    case "loop_iteration":
      return `  ${String(d.key)}: iteration ${String(d.iteration)}`;
    case "approval_requested":
      return `  ${String(d.stepId)}: waiting for approval${d.message ? ` (${String(d.message)})` : ""}: kova approve ${e.runId} ${String(d.approvalId)}  |  kova reject ${e.runId} ${String(d.approvalId)}`;
    case "approval_granted":
    case "approval_rejected":
      return `  ${String(d.stepId)}: ${e.type === "approval_granted" ? "approved" : "rejected"}${d.by ? ` by ${String(d.by)}` : ""}`;
    case "run_completed":
      return `run ${e.runId} completed: ${typeof d.output === "string" ? d.output : JSON.stringify(d.output)}`;
    case "run_failed":
      return `run ${e.runId} failed: ${err(d.error)}`;
    case "run_cancelled":
      return `run ${e.runId} cancelled`;
    default:
      return undefined;
  }
}

function jsonArg(value: string | undefined, flag: string): unknown {
  if (value === undefined) return undefined;
  try {
    return JSON.parse(value) as unknown;
  } catch (err) {
    throw new ArgumentError(flag, `is not JSON (${(err as Error).message})`);
  }
}

/** Sends a signal and says what the run did with it (it answers: delivered, kept or ignored). */
export async function sendSignal(client: KovaClient, runId: string, payload: Record<string, unknown>): Promise<string> {
  const run = await readRun(client, runId);
  if (run.status !== "running" && run.status !== "new")
    throw new KovaError(WorkflowErrorCode.RUN_NOT_FOUND, `run ${runId} has ended (${run.status}); it takes no signals`);
  const reply = await client.ask<{ outcome: unknown }>(runId, WorkflowMessageType.signal, payload, { timeoutMs: 30_000 });
  const outcome = reply.payload?.outcome;
  if (typeof outcome === "object" && outcome !== null)
    throw new ArgumentError("signal", (outcome as { ignored?: { message?: string } }).ignored?.message ?? "refused by the run");
  return String(outcome);
}

export function register(program: Command): void {
  const wf = program.command("workflow").description("declarative workflows: run a workflow file, follow, inspect, cancel, signal");

  targetOptions(wf.command("run <file>").description("start a run of a workflow file (TOML, or JSON by extension)"))
    .option("-i, --input <name=value>", "an input value (repeatable), or a JSON object", (v: string, prev: string[]) => [...prev, v], [] as string[])
    .option("--session <id>", "session id of the run's events (default: the run id)")
    .option("--run-id <id>", "run id (default: wf-<random>)")
    .option("-f, --follow", "print progress until the run ends; exit 1 unless it completed")
    .option("--json", "print JSON")
    .action((file: string, o: TargetOpts & { input: string[]; session?: string; runId?: string; follow?: boolean }) =>
      withClient(o, async (client) => {
        const { raw, definition } = await loadWorkflowFile(file);
        const input = checkInput(definition, parseInputs(o.input));
        if (o.session !== undefined && !isValidId(o.session)) throw new ArgumentError("--session", "must be an id of [A-Za-z0-9_-]");
        const runId = o.runId ?? newRunId();
        const sessionId = o.session ?? runId;
        // Subscribe before starting, so that no event of the run is missed.
        const stream = o.follow ? client.events({ sessionId }) : undefined;
        if (stream) await client.bus.nc.flush();
        const started = await startRun(client, { raw, input, runId, sessionId });
        const { existing, run } = started;
        const ended = runEnded(run);
        if (o.json && (!stream || ended)) {
          if (stream) stream.stop();
          if (ended && run.status !== "completed") process.exitCode = 1;
          return print({ runId, sessionId: started.sessionId, workflowId: run.workflowId ?? definition.id, existing, status: run.status });
        }
        process.stdout.write(
          existing
            ? `run ${runId} of ${run.workflowId ?? "?"} exists (${run.status}, session ${started.sessionId}): it was not started again\n`
            : `started ${definition.id} run ${runId} (session ${sessionId})\n`,
        );
        if (!stream || ended) {
          stream?.stop();
          if (ended) {
            process.stdout.write(`run ${runId} ${run.status}${run.error ? `: ${run.error.message}` : ""}: kova workflow status ${runId}\n`);
            if (run.status !== "completed") process.exitCode = 1;
          } else {
            process.stdout.write(`follow it: kova workflow status ${runId}  |  kova events tail --session ${started.sessionId} --tree\n`);
          }
          return;
        }
        let events = stream;
        // A run that existed may have another session than the one subscribed to: follow its
        // own, after reading it once more (an end before this subscription sends no event).
        if (started.sessionId !== sessionId) {
          stream.stop();
          events = client.events({ sessionId: started.sessionId });
          await client.bus.nc.flush();
          const now = await readRun(client, runId);
          if (runEnded(now)) {
            events.stop();
            process.stdout.write(`run ${runId} ${now.status}: kova workflow status ${runId}\n`);
            if (now.status !== "completed") process.exitCode = 1;
            return;
          }
        }
        const stop = () => events.stop();
        process.once("SIGINT", stop);
        let status = "running";
        for await (const e of events) {
          if (e.runId !== runId) continue;
          const line = progressLine(e);
          if (line) process.stdout.write(`${line}\n`);
          if (e.type === "run_stream_end") {
            status = String((e.data as { status?: unknown })?.status);
            break;
          }
        }
        events.stop();
        if (status !== "completed") process.exitCode = 1;
      }),
    );

  targetOptions(wf.command("status <runId>").description("a run's status, steps, open approvals and output"))
    .option("--json", "print JSON")
    .action((runId: string, o: TargetOpts) =>
      withClient(o, async (client) => {
        const run = await readRun(client, runId);
        if (o.json) return print(run);
        const took = run.endedAt ? ` in ${((run.endedAt - run.createdAt) / 1000).toFixed(1)}s` : "";
        process.stdout.write(
          `run ${run.runId} of ${run.workflowId ?? "?"}: ${run.status}${took} (session ${run.sessionId}, tokens ${run.usage.inputTokens}/${run.usage.outputTokens})\n`,
        );
        if (run.steps.length > 0) {
          table(
            ["STEP", "TYPE", "STATUS", "ATTEMPTS", "AGENT", "TIME", "ERROR"],
            run.steps.map((s) => [
              s.key,
              s.type,
              s.status,
              String(s.attempts),
              s.agent ?? "",
              s.durationMs === undefined ? "" : `${(s.durationMs / 1000).toFixed(1)}s`,
              s.error?.message.slice(0, 60) ?? "",
            ]),
          );
        }
        for (const a of run.approvals)
          process.stdout.write(
            `waiting for approval ${a.approvalId}: kova approve ${run.runId} ${a.approvalId}  |  kova reject ${run.runId} ${a.approvalId}\n`,
          );
        for (const ev of run.events) process.stdout.write(`waiting for event ${ev}: kova workflow signal ${run.runId} ${ev}\n`);
        for (const w of run.subjects ?? []) process.stdout.write(`${w.stepId}: waiting for a message on ${w.subject}\n`);
        if (run.output !== undefined) process.stdout.write(`output: ${typeof run.output === "string" ? run.output : JSON.stringify(run.output)}\n`);
        if (run.error) process.stdout.write(`error: ${run.error.message} [${run.error.code}]\n`);
      }),
    );

  targetOptions(wf.command("cancel <runId>").description("cancel a run (agent turns in flight finish; their results are ignored)"))
    .option("--reason <text>", "why, recorded in the run_cancelled event")
    .action((runId: string, o: TargetOpts & { reason?: string }) =>
      withClient(o, async (client) => {
        assertRunId(runId);
        const reply = await client.ask<{ outcome: unknown; run: RunSummary }>(
          runId,
          WorkflowMessageType.cancel,
          { ...(o.reason ? { reason: o.reason } : {}) },
          { timeoutMs: 30_000 },
        );
        process.stdout.write(
          `${String(reply.payload.outcome) === "cancelled" ? "cancelled" : `not cancelled: the run is ${reply.payload.run.status}`} ${runId}\n`,
        );
      }),
    );

  targetOptions(wf.command("ls").description("workflow runs in the cluster, newest first"))
    .option("--json", "print JSON")
    .action((o: TargetOpts) =>
      withClient(o, async (client) => {
        const records = (await readRegistry(client.bus.nc, client.bus.cluster)).filter((r) => r.type === WORKFLOW_ACTOR_TYPE);
        const store = await NatsCheckpointStore.open({ js: client.bus.js, cluster: client.bus.cluster });
        const runs = await Promise.all(
          records.map(async (r) => {
            const stored = (await store.load(r.id))?.state;
            const state = stored === undefined ? undefined : readRunState(r.id, stored);
            return {
              runId: r.id,
              workflowId: state?.workflow?.id ?? null,
              status: state?.status ?? "new",
              createdAt: state?.createdAt ?? r.updatedAt,
              endedAt: state?.endedAt ?? null,
              node: r.node,
            };
          }),
        );
        runs.sort((a, b) => b.createdAt - a.createdAt);
        if (o.json) return print(runs);
        table(
          ["RUN", "WORKFLOW", "STATUS", "STARTED", "TOOK", "NODE"],
          runs.map((r) => [
            r.runId,
            r.workflowId ?? "?",
            r.status,
            new Date(r.createdAt).toISOString(),
            r.endedAt ? `${((r.endedAt - r.createdAt) / 1000).toFixed(1)}s` : "",
            r.node ?? "-",
          ]),
        );
      }),
    );

  targetOptions(wf.command("signal <runId> <event>").description("send an event to a run (ends a wait for that event)"))
    .option("--data <json>", "data the wait step outputs")
    .action((runId: string, event: string, o: TargetOpts & { data?: string }) =>
      withClient(o, async (client) => {
        const data = jsonArg(o.data, "--data");
        const outcome = await sendSignal(client, runId, { event, ...(data === undefined ? {} : { data }) });
        process.stdout.write(
          outcome === "delivered" ? `event ${event} ended a wait of ${runId}\n` : `event ${event} kept by ${runId} until a step waits for it\n`,
        );
      }),
    );
}

/** Renders a session's run tree (history from the EVENTS stream, then live) until `done`. */
export async function tailTree(
  client: KovaClient,
  sessionId: string | undefined,
  opts: { max?: number; untilDone?: boolean; out?: NodeJS.WriteStream },
): Promise<void> {
  const view = new LiveRunTree(opts.out ?? process.stdout);
  const events = await sessionEvents(client, sessionId);
  const stop = () => events.stop();
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  let n = 0;
  try {
    for await (const { event, caughtUp } of events) {
      view.apply(event);
      n++;
      // Done only once the stored history is read: a session whose runs came one after
      // another has every run seen so far ended at the end of each (the first one's end
      // used to stop the tail there).
      if ((opts.max !== undefined && n >= opts.max) || (opts.untilDone && caughtUp && view.tree.done())) break;
    }
  } finally {
    events.stop();
    view.finish();
  }
}

/** An event, and whether every event stored before it was read (nothing pending: what follows is live). */
interface TailedEvent {
  event: KovaEvent;
  caughtUp: boolean;
}

/** A session's events from the start of the EVENTS stream, then live; or all live events without a session. */
async function sessionEvents(client: KovaClient, sessionId: string | undefined): Promise<AsyncIterable<TailedEvent> & { stop(): void }> {
  if (sessionId === undefined) {
    const live = client.events();
    async function* all(): AsyncGenerator<TailedEvent> {
      for await (const event of live) yield { event, caughtUp: true };
    }
    const it = all();
    return { [Symbol.asyncIterator]: () => it, stop: () => live.stop() };
  }
  const bus = client.bus;
  const reader = await bus.readStoredEvents(bus.subjects.sessionEvents(sessionId));
  async function* iterate(): AsyncGenerator<TailedEvent> {
    for await (const m of reader.messages) {
      try {
        yield { event: m.json<KovaEvent>(), caughtUp: m.info.pending === 0 };
      } catch {
        // not an event
      }
    }
  }
  const it = iterate();
  return { [Symbol.asyncIterator]: () => it, stop: () => reader.close() };
}
