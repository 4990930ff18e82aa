import { KvStore, type KvConnection } from "../bus/index.js";
import { recordFormat, componentLogger, silentLogger, type Logger } from "../core/index.js";

/**
 * Durable timers of workflow runs: retry backoffs, step and wait timeouts, timer waits.
 * An actor has no clock of its own between messages, so a timer is a KV entry
 * (`kova_<c>_workflow_timers`, key `<runId>.<timerId>`) that every node's TimerService
 * watches; when it is due, a `workflow.timer` message goes to the run's inbox with the
 * timer id as its message id. The entry outlives the node that wrote it, so a run whose
 * node died still wakes up on its new host; several nodes firing one timer store one
 * message (JetStream's duplicate window) and the run ignores a timer it no longer waits for.
 */
export interface TimerEntry {
  runId: string;
  timerId: string;
  /** Epoch milliseconds. */
  due: number;
}

/** Format version of a stored timer (timers written before versioning have no `v`: version 1). */
export const TIMER_VERSION = 1;

export const TIMER_FORMAT = recordFormat<TimerEntry>({
  describe: (key) => `workflow timer ${key}`,
  version: TIMER_VERSION,
  readable: [1],
  read: (_key, value) => {
    const stored = value as TimerEntry;
    return { runId: stored.runId, timerId: stored.timerId, due: stored.due };
  },
});

export class WorkflowTimers {
  readonly #local = new Set<(e: TimerEntry) => void>();

  private constructor(readonly store: KvStore<TimerEntry>) {}

  /**
   * Opens (creating if needed) the timers bucket.
   * @throws JetStream errors when JetStream is unavailable
   */
  static async open(opts: { js: KvConnection; cluster: string; replicas?: number }): Promise<WorkflowTimers> {
    return new WorkflowTimers(await KvStore.open(opts.js, opts.cluster, "workflowTimers", TIMER_FORMAT, { replicas: opts.replicas }));
  }

  static key(e: Pick<TimerEntry, "runId" | "timerId">): string {
    return `${e.runId}.${e.timerId}`;
  }

  /** Stores a timer (idempotent: the same id again overwrites it) and tells this process's service at once. */
  async set(e: TimerEntry): Promise<void> {
    await this.store.put(WorkflowTimers.key(e), { runId: e.runId, timerId: e.timerId, due: e.due });
    for (const l of this.#local) l(e);
  }

  /** Removes every timer of a run (it ended). */
  async clear(runId: string): Promise<number> {
    const keys = await this.store.keys({ filter: `${runId}.>` });
    await Promise.all(keys.map((k) => this.store.delete(k)));
    return keys.length;
  }

  async delete(e: Pick<TimerEntry, "runId" | "timerId">): Promise<void> {
    await this.store.delete(WorkflowTimers.key(e));
  }

  /** Timers set through this handle, as they are set (the service arms them without waiting for its watch). */
  onLocalSet(listener: (e: TimerEntry) => void): () => void {
    this.#local.add(listener);
    return () => this.#local.delete(listener);
  }
}

export interface TimerServiceOptions {
  timers: WorkflowTimers;
  /** Sends the `workflow.timer` message (message id = timer id). */
  fire: (e: TimerEntry) => Promise<void>;
  /**
   * True when this node hosts the run: it fires at the due time; other nodes wait
   * `graceMs` more and fire only if the timer is still there (its host died or is slow).
   */
  isLocal?: (runId: string) => boolean;
  graceMs?: number;
  logger?: Logger;
}

/**
 * Fires due workflow timers. One per node; every node watches the whole bucket, so a
 * timer is fired even when the node that set it is gone.
 */
export class TimerService {
  readonly #entries = new Map<string, TimerEntry>();
  readonly #firing = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #watch: { stop(): void } | undefined;
  #unlisten: () => void = () => undefined;
  readonly #log: Logger;

  private constructor(private readonly o: TimerServiceOptions) {
    this.#log = componentLogger(o.logger ?? silentLogger(), "workflow-timers");
  }

  /** @throws JetStream errors when the watch cannot start */
  static async start(o: TimerServiceOptions): Promise<TimerService> {
    const svc = new TimerService(o);
    svc.#unlisten = o.timers.onLocalSet((e) => svc.#add(e));
    svc.#watch = await o.timers.store.follow(">", { onPut: (_key, e) => svc.#add(e), onDelete: (key) => svc.#entries.delete(key) }, svc.#log);
    return svc;
  }

  /** Timers this service knows and has not fired. */
  pending(): TimerEntry[] {
    return [...this.#entries.values()];
  }

  #add(e: TimerEntry): void {
    this.#entries.set(WorkflowTimers.key(e), e);
    this.#schedule();
  }

  #fireAt(e: TimerEntry): number {
    const local = this.o.isLocal?.(e.runId) ?? true;
    return local ? e.due : e.due + (this.o.graceMs ?? 5000);
  }

  #schedule(): void {
    if (this.#stopped) return;
    if (this.#timer) clearTimeout(this.#timer);
    let next = Number.POSITIVE_INFINITY;
    for (const e of this.#entries.values()) next = Math.min(next, this.#fireAt(e));
    if (next === Number.POSITIVE_INFINITY) return;
    // Re-checked at least every few seconds: isLocal changes as runs move between nodes.
    const delay = Math.max(0, Math.min(next - Date.now(), 5000));
    this.#timer = setTimeout(() => this.#tick(), delay);
    this.#timer.unref();
  }

  #tick(): void {
    const now = Date.now();
    for (const [key, e] of this.#entries) {
      if (this.#fireAt(e) > now || this.#firing.has(key)) continue;
      this.#firing.add(key);
      void this.o
        .fire(e)
        .then(async () => {
          this.#entries.delete(key);
          await this.o.timers.delete(e).catch(() => undefined);
        })
        .catch((err: unknown) => {
          // Try again in a second (NATS may be electing a leader), not in a tight loop.
          if (this.#entries.has(key)) this.#entries.set(key, { ...e, due: Date.now() + 1000 });
          this.#log.warn({ err, timer: key }, "could not fire a workflow timer; retrying");
        })
        .finally(() => {
          this.#firing.delete(key);
          this.#schedule();
        });
    }
    this.#schedule();
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#unlisten();
    this.#watch?.stop();
  }

  [Symbol.dispose](): void {
    this.stop();
  }
}
