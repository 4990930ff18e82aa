import type { StreamResponse, Task } from "@a2a-js/sdk";
import type { Logger } from "../core/index.js";
import type { SignalReply } from "../cluster/index.js";
import type { RunClient, RunRequest } from "./runs.js";
import { kovaMeta, TaskProjection, zeroUsage, type RunOutcome } from "./task-projection.js";
import type { NatsTaskStore } from "./task-store.js";

type Listener = (update: StreamResponse | undefined) => void;

/** How often, and how far apart, the interrupt of a canceled task's late-starting run is sent (about 10 s in all). */
const LATE_START_ATTEMPTS = 40;
const LATE_START_RETRY_MS = 250;
/**
 * How long a blocking send's task waits for its run's reply before it follows the run's
 * events (docs/gateway.md, "Tasks"): a run answered sooner costs no events consumer.
 */
export const FOLLOW_AFTER_MS = 2_000;

export interface LiveTaskOptions {
  /**
   * When to start following the run's events: `now` (default), or after this many ms
   * unless the run's reply settles the task first. Streaming it, getting it, cancelling it
   * or subscribing to it starts following at once.
   */
  follow?: "now" | number;
  /** The task entry's revision as this replica saved it (its saves are then one compare-and-set). */
  revision?: number;
}

/**
 * One task this gateway replica is watching: it folds the run's events (read from the
 * EVENTS stream) into the task, saves each state change to the task store, and hands the
 * updates to the clients streaming it. A task is watched by the replica that started it,
 * and by any replica a client asks about a task that is still running (a subscribe, a
 * get): those replay the run's events from its first one, so they reach the same task.
 *
 * A blocking send's task follows the events only once its run has taken `FOLLOW_AFTER_MS`
 * (or someone asks about it): a run that ends sooner is settled by its reply alone, which
 * carries what the task's end needs (status, answer, usage, error), and the task's saved
 * state goes from `submitted` to the end in one save. Following replays from the run's
 * first event, so a task followed late reaches the same state.
 */
export class LiveTask {
  readonly projection: TaskProjection;
  private readonly listeners = new Set<Listener>();
  /** Stops the reading of the run's events (made when following starts: a task settled without it needs none). */
  private abort: AbortController | undefined;
  /** Set by `settle` or `stop`: a reading that starts after it ends at once. */
  private stopped = false;
  private caughtUp = false;
  private readonly caughtUpWaiters = new Set<() => void>();
  private lastSeq = 0;
  /** Set by `cancelQueued`: cuts the run should its turn start after all. */
  private reinterrupt: (() => Promise<SignalReply>) | undefined;
  /** The run's events have ended (or the tracker stopped following them). */
  private followed = false;
  /** Set once the run's events are being read. */
  private following: Promise<void> | undefined;
  private followTimer: NodeJS.Timeout | undefined;
  private revision: number | undefined;
  private ended = false;
  private resolveDone!: () => void;
  /** Resolves when the task is terminal (or the tracker stopped). */
  readonly done: Promise<void>;

  constructor(
    initial: Task,
    private readonly runs: RunClient,
    private readonly store: NatsTaskStore | undefined,
    private readonly log: Logger,
    private readonly onEnd: () => void,
    opts: LiveTaskOptions = {},
  ) {
    this.projection = new TaskProjection(initial);
    this.revision = opts.revision;
    this.done = new Promise((r) => (this.resolveDone = r));
    const follow = opts.follow ?? "now";
    if (follow === "now") this.follow();
    else {
      this.followTimer = setTimeout(() => this.follow(), follow);
      this.followTimer.unref();
    }
  }

  /** Follows the run's events from its first one, unless already following (or ended). */
  follow(): void {
    if (this.following || this.ended) return;
    clearTimeout(this.followTimer);
    this.following = this.followEvents().finally(() => this.end());
  }

  /** The task is settled or no longer watched: listeners hear the end, the tracker forgets it. */
  private end(): void {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.followTimer);
    this.followed = true;
    this.markCaughtUp();
    for (const l of this.listeners) l(undefined);
    this.listeners.clear();
    this.onEnd();
    this.resolveDone();
  }

  get task(): Task {
    return this.projection.task;
  }

  private async followEvents(): Promise<void> {
    const abort = (this.abort = new AbortController());
    if (this.stopped) return;
    const m = kovaMeta(this.projection.task);
    // A run with no event stored yet (its message still queued) has nothing to replay: a
    // get or cancel of it need not wait out the catch-up timeout.
    this.runs.lastSeq(m.sessionId, m.runId).then(
      (last) => last === 0 && this.markCaughtUp(),
      () => undefined,
    );
    try {
      for await (const { seq, event, pending } of this.runs.follow(m.sessionId, m.runId, { signal: abort.signal })) {
        this.lastSeq = seq;
        if (this.reinterrupt) {
          if (event.type === "run_started") void this.cutLateStart(this.reinterrupt);
          continue;
        }
        this.emit(this.projection.apply(event));
        if (pending === 0) this.markCaughtUp();
        if (this.caughtUp) await this.save();
        if (this.projection.terminal && !this.reinterrupt) return;
      }
    } catch (err) {
      if (!abort.signal.aborted) this.log.warn({ err, taskId: this.task.id }, "stopped following a run's events");
    }
  }

  private markCaughtUp(): void {
    if (this.caughtUp) return;
    this.caughtUp = true;
    for (const w of this.caughtUpWaiters) w();
    this.caughtUpWaiters.clear();
  }

  /** Resolves once the replay reached the stream's end (or after `timeoutMs`). */
  whenCaughtUp(timeoutMs: number): Promise<void> {
    if (this.caughtUp) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, timeoutMs);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.caughtUpWaiters.add(done);
    });
  }

  private async save(): Promise<void> {
    const store = this.store;
    if (!this.projection.dirty || !store) return;
    this.projection.dirty = false;
    try {
      this.revision = await store.saveProgress(this.projection.task, this.revision);
    } catch (err) {
      this.projection.dirty = true;
      this.revision = undefined;
      this.log.warn({ err, taskId: this.task.id }, "could not save the task; the next change retries");
    }
  }

  private emit(updates: StreamResponse[]): void {
    for (const u of updates) for (const l of this.listeners) l(u);
  }

  /**
   * The agent's reply to the run's message arrived. Its events normally came first (the
   * agent emits `run_completed` before it replies); when they have not been read yet, the
   * reply ends the task after a short grace, so an actor that emits no events at all
   * still completes its task.
   */
  async settle(outcome: RunOutcome, graceMs: number): Promise<void> {
    if (this.following) {
      const m = kovaMeta(this.projection.task);
      const lastSeq = await this.runs.lastSeq(m.sessionId, m.runId).catch(() => Number.MAX_SAFE_INTEGER);
      const deadline = performance.now() + graceMs;
      while (!this.projection.terminal && this.lastSeq < lastSeq && performance.now() < deadline) {
        await new Promise((r) => setTimeout(r, 10));
      }
    }
    if (!this.projection.terminal) this.emit(this.projection.finish(outcome));
    // The reply means the run is over: nothing more to follow (a task canceled while queued
    // is followed until now, and its run may end without the events that would stop it).
    this.halt();
    await this.save();
    if (!this.following) this.end();
  }

  /**
   * Ends a task whose message is still queued behind the agent's other work: `canceled`
   * now, because the agent's host has taken the interrupt and cuts that message's turn as
   * it starts (before any model call). The run is still followed until it ends: should its
   * turn start after all (the agent moved to a node that never heard of the interrupt),
   * `reinterrupt` cuts it there.
   */
  async cancelQueued(reinterrupt: () => Promise<SignalReply>): Promise<void> {
    this.reinterrupt = reinterrupt;
    this.emit(this.projection.finish({ status: "cancelled", output: "", usage: zeroUsage() }));
    await this.save();
  }

  /**
   * The run of a task canceled while queued started after all. The registry this replica
   * reads may name the agent's former node for a moment after a move, so the interrupt is
   * sent again until the node running the turn cuts it (or the run ends).
   */
  private async cutLateStart(reinterrupt: () => Promise<SignalReply>): Promise<void> {
    let last: unknown;
    for (let attempt = 0; attempt < LATE_START_ATTEMPTS && !this.followed; attempt++) {
      try {
        const reply = await reinterrupt();
        if (reply.interrupted === "interrupted") {
          this.log.info({ taskId: this.task.id, node: reply.node }, "a canceled task's run started anyway; interrupted it");
          return;
        }
        last = `node ${reply.node} is not running it`;
      } catch (err) {
        last = err;
      }
      await new Promise((r) => setTimeout(r, LATE_START_RETRY_MS));
    }
    if (!this.followed) this.log.warn({ err: last, taskId: this.task.id }, "a canceled task's run started anyway and could not be interrupted");
  }

  /** Updates from now on; `undefined` marks the end (terminal, or the tracker stopped). */
  listen(listener: Listener): () => void {
    if (this.projection.terminal) {
      listener(undefined);
      return () => undefined;
    }
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * The updates from this call on, until the task settles (terminal or waiting for input)
   * or the caller stops iterating. It listens at once, before the caller iterates, so a
   * snapshot sent first misses nothing that happens meanwhile.
   */
  updates(until: "settled" | "terminal" = "settled"): AsyncGenerator<StreamResponse> {
    // A client streams it: every event counts from now on.
    this.follow();
    const queue: Array<StreamResponse | undefined> = [];
    let wake: (() => void) | undefined;
    const off = this.listen((u) => {
      queue.push(u);
      wake?.();
    });
    const projection = this.projection;
    return (async function* () {
      try {
        for (;;) {
          while (queue.length === 0) await new Promise<void>((r) => (wake = r));
          wake = undefined;
          const u = queue.shift();
          if (u === undefined) return;
          yield u;
          if ((until === "settled" ? projection.settled : projection.terminal) && queue.length === 0) return;
        }
      } finally {
        off();
      }
    })();
  }

  /** The stream position of the last event folded in (for tests and diagnostics). */
  get position(): number {
    return this.lastSeq;
  }

  stop(): void {
    this.halt();
    if (!this.following) this.end();
  }

  /** Ends the reading of the run's events, or keeps one from starting. */
  private halt(): void {
    this.stopped = true;
    this.abort?.abort();
  }
}

/** The tasks this replica watches, by task id. */
export class TaskTracker {
  private readonly live = new Map<string, LiveTask>();
  constructor(
    private readonly runs: RunClient,
    private readonly store: NatsTaskStore,
    private readonly log: Logger,
    /** A task is watched at most this long (a run that never ends must not hold a consumer forever). */
    private readonly maxWatchMs = 3_600_000,
  ) {}

  get(taskId: string): LiveTask | undefined {
    return this.live.get(taskId);
  }

  /**
   * Watches a task (a new one, or one another replica started), unless already watched; a
   * watched task not following its run's events yet follows them now (a client asks about it).
   */
  watch(task: Task, opts: LiveTaskOptions = {}): LiveTask {
    const existing = this.live.get(task.id);
    if (existing) {
      existing.follow();
      return existing;
    }
    const timer = setTimeout(() => lt.stop(), this.maxWatchMs);
    timer.unref();
    const lt: LiveTask = new LiveTask(
      task,
      this.runs,
      this.store,
      this.log,
      () => {
        clearTimeout(timer);
        if (this.live.get(task.id) === lt) this.live.delete(task.id);
      },
      opts,
    );
    this.live.set(task.id, lt);
    return lt;
  }

  /**
   * Starts a run for a new (already saved) task and watches it: the run's message is sent
   * durably, and the agent's reply settles the task if its events did not. `follow` and
   * `revision`: see LiveTaskOptions.
   */
  start(task: Task, req: RunRequest, opts: { graceMs?: number; persist?: boolean } & LiveTaskOptions = {}): LiveTask {
    const { graceMs, persist, ...watch } = opts;
    // An OpenAI-style call keeps no task: it is watched for its stream only.
    const lt = persist === false ? new LiveTask(task, this.runs, undefined, this.log, () => undefined, watch) : this.watch(task, watch);
    void this.runs
      .run(req)
      .then((outcome) => lt.settle(outcome, graceMs ?? 2000))
      .catch((err: unknown) => this.log.warn({ err, taskId: task.id }, "could not settle a task from its reply"));
    return lt;
  }

  get size(): number {
    return this.live.size;
  }

  /** Stops watching everything (a gateway stop): tasks stay as saved, and any replica resumes them. */
  async stop(): Promise<void> {
    const all = [...this.live.values()];
    for (const lt of all) lt.stop();
    await Promise.all(all.map((lt) => lt.done));
  }
}
