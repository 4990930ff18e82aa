import { componentLogger, silentLogger, type Logger } from "../core/index.js";
import { DEFAULT_CODEC_LIMITS, decodeEnvelope, newInbox, type Bus, type KovaEvent, type StoredEventsReader } from "../bus/index.js";
import { isRunStatus, readUsage, reportedError, RunEventType, type ResultNotifyPayload, type RunStatus, type RunUsage } from "./run-protocol.js";

/** How a delegated run ended, from its `result_notify` or its terminal event. */
export interface RunOutcome {
  runId: string;
  status: RunStatus;
  output: string;
  usage: RunUsage;
  error?: { code: string; message: string };
  /** The agent that ran it (from its `run_started`), when known. */
  agentId?: string;
  /** Where the outcome was read: the reply inbox, or the session's events on the stream. */
  source: "reply" | "event";
  /** The reply's payload or the terminal event's data, for fields beyond the protocol's. */
  detail: Record<string, unknown>;
}

export interface RunWatcherOptions {
  sessionId: string;
  /**
   * Watch one run's subject from its first event (an agent-as-tool call knows its one
   * child). Without it the watcher reads every run of the session from `since`.
   */
  runId?: string;
  /**
   * Epoch ms from which the session's stored events are read (default: now). Stored events
   * are stamped by the NATS server's clock; give some slack for clock skew between nodes.
   */
  since?: number;
  logger?: Logger;
}

interface Waiter {
  runIds: ReadonlySet<string>;
  settle(): void;
}

const TERMINAL: Record<string, RunStatus> = {
  [RunEventType.completed]: "completed",
  [RunEventType.failed]: "failed",
  [RunEventType.cancelled]: "cancelled",
};

/**
 * Collects the outcomes of runs delegated to agents. Two sources feed it, and the first
 * outcome of a run wins:
 * - the `result_notify` replies that arrive on its reply inbox (`replyTo`): the fast path
 *   while the delegator lives;
 * - the runs' events, read from the EVENTS stream with an ordered consumer from `since`
 *   (or from the run's first event): the durable path. A delegator that was taken over by
 *   another node, or that re-runs a tool call after a crash, finds there the outcomes that
 *   arrived while nobody listened, since the reply went to an inbox that died with its
 *   process and a re-sent delegation is dropped as a duplicate (no second reply comes).
 */
export class RunWatcher implements AsyncDisposable {
  readonly replyTo: string;
  readonly #outcomes = new Map<string, RunOutcome>();
  readonly #agents = new Map<string, string>();
  readonly #correlations = new Map<string, string>();
  readonly #waiters = new Set<Waiter>();
  readonly #listeners = new Set<(o: RunOutcome) => void>();
  readonly #log: Logger;
  #sub: { unsubscribe(): void } | undefined;
  #events: StoredEventsReader | undefined;
  #closed = false;
  #markCaughtUp!: () => void;
  /**
   * Resolves once the watcher has read every stored event its filter matched when it
   * started (a delivered event with nothing pending behind it). A filter that matches no
   * stored event never resolves it: bound the wait. A caller that must not miss an outcome
   * already stored (a coordinator taken over after its deadline) awaits it before `wait`.
   */
  readonly caughtUp = new Promise<void>((resolve) => (this.#markCaughtUp = resolve));

  private constructor(
    private readonly bus: Bus,
    logger: Logger,
  ) {
    this.replyTo = newInbox(bus.nc);
    this.#log = componentLogger(logger, "run-watcher");
  }

  /**
   * Subscribes to the reply inbox and starts reading the session's events.
   * @throws JetStream errors when the EVENTS stream is missing
   */
  static async start(bus: Bus, opts: RunWatcherOptions): Promise<RunWatcher> {
    const w = new RunWatcher(bus, opts.logger ?? silentLogger());
    w.#sub = bus.nc.subscribe(w.replyTo, { callback: (err, msg) => (err ? undefined : w.#onReply(msg.data, msg.headers)) });
    const subjects = bus.subjects;
    const filter = opts.runId ? subjects.events(opts.sessionId, opts.runId) : subjects.sessionEvents(opts.sessionId);
    try {
      w.#events = await bus.readStoredEvents(filter, opts.runId ? undefined : { startTime: new Date(opts.since ?? Date.now()) });
    } catch (err) {
      await w.close();
      throw err;
    }
    void w.#readEvents(w.#events.messages);
    return w;
  }

  /** Says which run a reply correlated with `correlationId` is about (a failure reply carries no payload). */
  expect(correlationId: string, runId: string): void {
    this.#correlations.set(correlationId, runId);
  }

  outcome(runId: string): RunOutcome | undefined {
    return this.#outcomes.get(runId);
  }

  /** The agent whose `run_started` named this run, if seen. */
  agentOf(runId: string): string | undefined {
    return this.#agents.get(runId);
  }

  /** Calls `fn` with every outcome from now on; returns the unsubscribe. */
  onOutcome(fn: (o: RunOutcome) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  /**
   * Resolves with the outcomes of `runIds` known when all of them have one, when `until`
   * (epoch ms) passes, or when the watcher closes: runs missing from the map had none.
   * @throws the signal's reason when `signal` aborts first
   */
  wait(runIds: Iterable<string>, opts: { until?: number; signal?: AbortSignal } = {}): Promise<Map<string, RunOutcome>> {
    const ids = new Set(runIds);
    const collect = () => {
      const out = new Map<string, RunOutcome>();
      for (const id of ids) {
        const o = this.#outcomes.get(id);
        if (o) out.set(id, o);
      }
      return out;
    };
    const { signal } = opts;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#closed || [...ids].every((id) => this.#outcomes.has(id))) return Promise.resolve(collect());
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (err?: unknown) => {
        this.#waiters.delete(waiter);
        if (timer) clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        if (err !== undefined) reject(err);
        else resolve(collect());
      };
      const waiter: Waiter = { runIds: ids, settle: () => done() };
      const onAbort = () => done(signal!.reason ?? new Error("aborted"));
      this.#waiters.add(waiter);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (opts.until !== undefined) timer = setTimeout(() => done(), Math.max(0, opts.until - Date.now()));
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#sub?.unsubscribe();
    // Also deletes the read's consumer (stopping a consume that never pulled is harmless).
    this.#events?.close();
    for (const w of [...this.#waiters]) w.settle();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #readEvents(messages: StoredEventsReader["messages"]): Promise<void> {
    try {
      for await (const m of messages) {
        try {
          this.#onEvent(m.json<KovaEvent>());
        } catch {
          // not an event: a stray publisher cannot stop the watch
        }
        if (m.info.pending === 0) this.#markCaughtUp();
      }
    } catch (err) {
      if (!this.#closed) this.#log.warn({ err }, "reading run events ended; outcomes now come from replies only");
    }
  }

  #onEvent(e: KovaEvent): void {
    if (typeof e?.runId !== "string") return;
    const data = (e.data ?? {}) as Record<string, unknown>;
    if (e.type === RunEventType.started) {
      if (typeof data.agentId === "string") this.#agents.set(e.runId, data.agentId);
      return;
    }
    const status = TERMINAL[e.type] ?? (e.type === RunEventType.streamEnd ? (data.status as RunStatus | undefined) : undefined);
    if (!isRunStatus(status)) return;
    const outcome: RunOutcome = {
      runId: e.runId,
      status,
      output: typeof data.output === "string" ? data.output : "",
      usage: readUsage(data.usage),
      source: "event",
      detail: data,
    };
    const err = reportedError(data.error);
    if (err) outcome.error = err;
    this.#record(outcome);
  }

  #onReply(data: Uint8Array, headers: Parameters<typeof decodeEnvelope>[1]): void {
    let env: ReturnType<typeof decodeEnvelope>;
    try {
      env = decodeEnvelope(data, headers, { ...DEFAULT_CODEC_LIMITS, maxBytes: this.bus.maxPayload }, this.replyTo);
    } catch (err) {
      this.#log.debug({ err }, "ignored an undecodable reply");
      return;
    }
    if (env.type !== "result_notify") return;
    const p = (env.payload ?? {}) as Partial<ResultNotifyPayload>;
    const runId = typeof p.runId === "string" ? p.runId : env.correlationId ? this.#correlations.get(env.correlationId) : undefined;
    if (!runId) return;
    const status: RunStatus = env.error ? "failed" : isRunStatus(p.status) ? p.status : "completed";
    const outcome: RunOutcome = {
      runId,
      status,
      output: typeof p.output === "string" ? p.output : "",
      usage: readUsage(p.usage),
      source: "reply",
      detail: p as Record<string, unknown>,
    };
    const err = env.error ? { code: env.error.code, message: env.error.message } : reportedError(p.error);
    if (err) outcome.error = err;
    this.#record(outcome);
  }

  #record(o: RunOutcome): void {
    if (this.#outcomes.has(o.runId)) return;
    const agentId = this.#agents.get(o.runId);
    if (agentId) o.agentId = agentId;
    this.#outcomes.set(o.runId, o);
    for (const fn of this.#listeners) fn(o);
    for (const w of [...this.#waiters]) {
      if (w.runIds.has(o.runId) && [...w.runIds].every((id) => this.#outcomes.has(id))) w.settle();
    }
  }
}
