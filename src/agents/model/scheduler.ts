import { ArgumentError, type Logger, componentLogger } from "../../core/index.js";
import { ModelCallAbortedError, SchedulerClosedError } from "./errors.js";
import type { AcquireSlot } from "./types.js";
import { DeadlineQueue, KeyedQueue, PriorityQueue, type Queued, type WaitQueue } from "./wait-queues.js";

export const SCHEDULE_POLICIES = ["round_robin", "priority", "fair_share", "deadline"] as const;

/**
 * How calls waiting for a model's slots are ordered:
 * - `round_robin` (default): one FIFO per agent, agents served in turn, so one busy agent
 *   cannot starve the others;
 * - `priority`: higher `priority` first, round-robin by agent within a level;
 * - `fair_share`: one FIFO per `shareKey` (user, session or budget group), the key served
 *   least recently goes first, so one busy user cannot starve the others;
 * - `deadline`: earliest `deadline` first, calls without one last.
 */
export type SchedulePolicy = (typeof SCHEDULE_POLICIES)[number];

export interface ModelSlots {
  maxConcurrency: number;
  policy?: SchedulePolicy;
}

/** Who asks for a slot, and what the policies order by. */
export interface SlotTicket {
  /** The model's config name. */
  model: string;
  agentId: string;
  /** For `priority`: higher goes first (default 0). */
  priority?: number;
  /** For `fair_share`: the user, session or budget group (default the agent id). */
  shareKey?: string;
  /** For `deadline`: epoch ms by which the caller wants an answer. */
  deadline?: number;
  /** Aborting it takes the call out of the queue. */
  signal?: AbortSignal;
  /**
   * The stats bucket of this call's wait times. Default: `priority_<n>` under `priority`,
   * `deadline` / `no_deadline` under `deadline`, else `default`. Keep the set small (not a
   * user id): each class keeps its own samples.
   */
  statsClass?: string;
  /** Called when the call has to wait (no free slot): for `schedule_blocked` events. */
  onQueued?: (info: QueuedInfo) => void;
}

export interface QueuedInfo {
  model: string;
  policy: SchedulePolicy;
  statsClass: string;
  /** Calls waiting for this model, this one included. */
  queued: number;
  inFlight: number;
  maxConcurrency: number;
}

/** Gives the slot back. Calling it again does nothing. */
export type ReleaseSlot = () => void;

export interface WaitStats {
  /** Waiting now. */
  queued: number;
  /** Slots granted since start (immediate ones included). */
  granted: number;
  /** Over the last 1,024 grants, in ms. */
  waitMs: { p50: number; p90: number; p99: number; max: number };
}

export interface ModelSlotStats {
  model: string;
  policy: SchedulePolicy;
  maxConcurrency: number;
  inFlight: number;
  queued: number;
  granted: number;
  classes: Record<string, WaitStats>;
}

export interface ModelCallSchedulerOptions {
  /** Where a throwing `onQueued` hook is reported. */
  logger?: Logger;
}

const SAMPLES = 1024;

interface Waiter extends Queued {
  readonly ticket: SlotTicket;
  readonly statsClass: string;
  readonly enqueuedAt: number;
  resolve(release: ReleaseSlot): void;
  reject(err: unknown): void;
  detach(): void;
}

class ClassStats {
  queued = 0;
  granted = 0;
  private readonly samples: number[] = [];
  private next = 0;

  record(waitMs: number): void {
    this.granted++;
    if (this.samples.length < SAMPLES) this.samples.push(waitMs);
    else this.samples[this.next] = waitMs;
    this.next = (this.next + 1) % SAMPLES;
  }

  view(): WaitStats {
    const sorted = [...this.samples].sort((a, b) => a - b);
    const at = (q: number) => (sorted.length === 0 ? 0 : round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!));
    return { queued: this.queued, granted: this.granted, waitMs: { p50: at(0.5), p90: at(0.9), p99: at(0.99), max: at(1) } };
  }
}

class Lane {
  inFlight = 0;
  granted = 0;
  queue: WaitQueue<Waiter>;
  readonly classes = new Map<string, ClassStats>();

  constructor(
    readonly model: string,
    public maxConcurrency: number,
    public policy: SchedulePolicy,
  ) {
    this.queue = newQueue(policy);
  }

  classStats(name: string): ClassStats {
    let s = this.classes.get(name);
    if (!s) {
      s = new ClassStats();
      this.classes.set(name, s);
    }
    return s;
  }
}

function newQueue(policy: SchedulePolicy): WaitQueue<Waiter> {
  switch (policy) {
    case "round_robin":
      return new KeyedQueue<Waiter>((w) => w.agentId, "rotation");
    case "fair_share":
      return new KeyedQueue<Waiter>((w) => w.shareKey, "least_recent");
    case "priority":
      return new PriorityQueue<Waiter>();
    case "deadline":
      return new DeadlineQueue<Waiter>();
  }
}

/**
 * The per-node provider-call scheduler: each model has `maxConcurrency` slots, and only
 * the provider call holds one (OpenAiModel takes it per attempt through
 * `ModelRequest.acquireSlot`, never across a backoff wait or a whole turn). Calls that
 * find no free slot wait in the order of the model's policy.
 */
export class ModelCallScheduler {
  private readonly lanes = new Map<string, Lane>();
  private seq = 0;
  private closed = false;
  private readonly log: Logger | undefined;

  /** @throws ArgumentError for a maxConcurrency below 1 */
  constructor(models: Iterable<[string, ModelSlots]> = [], options: ModelCallSchedulerOptions = {}) {
    this.log = options.logger && componentLogger(options.logger, "model-scheduler");
    for (const [name, slots] of models) this.setModel(name, slots);
  }

  /**
   * Adds a model or changes its slots or policy; calls already waiting keep their place in
   * arrival order under a new policy, and a raised limit lets waiters in at once.
   * @throws ArgumentError for a maxConcurrency below 1
   */
  setModel(name: string, slots: ModelSlots): void {
    if (!Number.isInteger(slots.maxConcurrency) || slots.maxConcurrency < 1) {
      throw new ArgumentError("maxConcurrency", `must be an integer of 1 or more, not ${slots.maxConcurrency}`);
    }
    const policy = slots.policy ?? "round_robin";
    let lane = this.lanes.get(name);
    if (!lane) {
      lane = new Lane(name, slots.maxConcurrency, policy);
      this.lanes.set(name, lane);
      return;
    }
    lane.maxConcurrency = slots.maxConcurrency;
    if (policy !== lane.policy) {
      const waiting: Waiter[] = [];
      for (let w = lane.queue.shift(); w; w = lane.queue.shift()) waiting.push(w);
      lane.policy = policy;
      lane.queue = newQueue(policy);
      for (const w of waiting.sort((a, b) => a.seq - b.seq)) lane.queue.push(w);
    }
    this.pump(lane);
  }

  /**
   * Waits for a slot of `ticket.model`.
   * @returns the function that gives the slot back (call it when the provider call ends)
   * @throws ArgumentError for a model the scheduler does not know
   * @throws ModelCallAbortedError when `ticket.signal` aborts first
   * @throws SchedulerClosedError when the scheduler closes first
   */
  acquire(ticket: SlotTicket): Promise<ReleaseSlot> {
    if (this.closed) return Promise.reject(new SchedulerClosedError(ticket.model));
    const lane = this.lanes.get(ticket.model);
    if (!lane) {
      return Promise.reject(
        new ArgumentError("model", `no slots for model ${JSON.stringify(ticket.model)}: known models are ${[...this.lanes.keys()].join(", ") || "(none)"}`),
      );
    }
    const signal = ticket.signal;
    if (signal?.aborted) return Promise.reject(new ModelCallAbortedError(ticket.model, "queued", signal.reason));
    const statsClass = ticket.statsClass ?? defaultClass(lane.policy, ticket);
    if (lane.inFlight < lane.maxConcurrency && lane.queue.size === 0) {
      lane.classStats(statsClass).record(0);
      return Promise.resolve(this.grant(lane));
    }
    return new Promise<ReleaseSlot>((resolve, reject) => {
      const onAbort = () => {
        lane.queue.remove(waiter);
        lane.classStats(statsClass).queued--;
        reject(new ModelCallAbortedError(ticket.model, "queued", signal?.reason));
      };
      const waiter: Waiter = {
        seq: ++this.seq,
        agentId: ticket.agentId,
        priority: ticket.priority ?? 0,
        shareKey: ticket.shareKey ?? ticket.agentId,
        deadline: ticket.deadline ?? Number.POSITIVE_INFINITY,
        ticket,
        statsClass,
        enqueuedAt: performance.now(),
        resolve,
        reject,
        detach: () => signal?.removeEventListener("abort", onAbort),
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      lane.queue.push(waiter);
      lane.classStats(statsClass).queued++;
      this.notifyQueued(lane, waiter);
    });
  }

  /** An AcquireSlot for `ModelRequest.acquireSlot`: each attempt of the call takes a slot with this ticket. */
  slotFor(ticket: SlotTicket): AcquireSlot {
    return () => this.acquire(ticket);
  }

  /** Per model: slots in use, calls waiting, and wait times per stats class (for `$SRV.STATS`). */
  stats(): ModelSlotStats[] {
    return [...this.lanes.values()].map((lane) => {
      const classes: Record<string, WaitStats> = {};
      for (const [name, s] of lane.classes) classes[name] = s.view();
      return {
        model: lane.model,
        policy: lane.policy,
        maxConcurrency: lane.maxConcurrency,
        inFlight: lane.inFlight,
        queued: lane.queue.size,
        granted: lane.granted,
        classes,
      };
    });
  }

  /** Rejects every waiting call with SchedulerClosedError and refuses new ones; held slots stay valid. */
  close(): void {
    this.closed = true;
    for (const lane of this.lanes.values()) {
      for (let w = lane.queue.shift(); w; w = lane.queue.shift()) {
        w.detach();
        lane.classStats(w.statsClass).queued--;
        w.reject(new SchedulerClosedError(lane.model));
      }
    }
  }

  private grant(lane: Lane): ReleaseSlot {
    lane.inFlight++;
    lane.granted++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      lane.inFlight--;
      this.pump(lane);
    };
  }

  private pump(lane: Lane): void {
    while (lane.inFlight < lane.maxConcurrency) {
      const w = lane.queue.shift();
      if (!w) return;
      w.detach();
      const stats = lane.classStats(w.statsClass);
      stats.queued--;
      stats.record(performance.now() - w.enqueuedAt);
      w.resolve(this.grant(lane));
    }
  }

  private notifyQueued(lane: Lane, w: Waiter): void {
    const hook = w.ticket.onQueued;
    if (!hook) return;
    try {
      hook({
        model: lane.model,
        policy: lane.policy,
        statsClass: w.statsClass,
        queued: lane.queue.size,
        inFlight: lane.inFlight,
        maxConcurrency: lane.maxConcurrency,
      });
    } catch (err) {
      this.log?.warn({ err, model: lane.model, agentId: w.agentId }, "onQueued hook threw; the call stays queued");
    }
  }
}

function defaultClass(policy: SchedulePolicy, ticket: SlotTicket): string {
  if (policy === "priority") return `priority_${ticket.priority ?? 0}`;
  if (policy === "deadline") return ticket.deadline === undefined ? "no_deadline" : "deadline";
  return "default";
}

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}
