import { MinHeap } from "./min-heap.js";

/**
 * The queue orders behind the scheduler's policies. Each holds waiters and hands out the
 * one that gets the next free slot; `remove` takes out a waiter whose caller gave up.
 */

/** What a queue needs to know of a waiter. */
export interface Queued {
  /** Arrival order, unique and increasing. */
  readonly seq: number;
  readonly agentId: string;
  readonly priority: number;
  readonly shareKey: string;
  /** Epoch ms; Infinity when the call has none. */
  readonly deadline: number;
}

export interface WaitQueue<W extends Queued> {
  readonly size: number;
  push(w: W): void;
  shift(): W | undefined;
  remove(w: W): void;
}

interface KeyState<W> {
  waiters: W[];
  /** Whether the key has an entry in the heap (entries of emptied keys are skipped when they surface). */
  inHeap: boolean;
}

interface KeyEntry {
  key: string;
  rank: number;
  seq: number;
}

/**
 * One FIFO per key, keys served in turn by rank (lowest first); a key that was served goes
 * behind every other. Where a new key starts is the difference between the policies:
 * - `rotation` (round_robin): behind the keys already waiting;
 * - `least_recent` (fair_share): by when it was last served, so a key that has not been
 *   served for a while (or ever) goes ahead of keys served since.
 */
export class KeyedQueue<W extends Queued> implements WaitQueue<W> {
  private readonly keys = new Map<string, KeyState<W>>();
  private readonly heap = new MinHeap<KeyEntry>((a, b) => a.rank < b.rank || (a.rank === b.rank && a.seq < b.seq));
  /** Rank a key gets when served (least_recent also keeps it for the key's next arrival). */
  private readonly lastServed = new Map<string, number>();
  private counter = 0;
  private count = 0;

  constructor(
    private readonly keyOf: (w: W) => string,
    private readonly newKeys: "rotation" | "least_recent",
    /** least_recent remembers this many keys; a forgotten key counts as never served. */
    private readonly memory = 10_000,
  ) {}

  get size(): number {
    return this.count;
  }

  push(w: W): void {
    const key = this.keyOf(w);
    let state = this.keys.get(key);
    if (!state) {
      state = { waiters: [], inHeap: false };
      this.keys.set(key, state);
    }
    state.waiters.push(w);
    this.count++;
    if (!state.inHeap) {
      const rank = this.newKeys === "rotation" ? ++this.counter : (this.lastServed.get(key) ?? 0);
      this.heap.push({ key, rank, seq: w.seq });
      state.inHeap = true;
    }
  }

  shift(): W | undefined {
    for (;;) {
      const entry = this.heap.pop();
      if (!entry) return undefined;
      const state = this.keys.get(entry.key);
      if (!state || state.waiters.length === 0) {
        this.keys.delete(entry.key);
        continue;
      }
      const w = state.waiters.shift()!;
      this.count--;
      const rank = ++this.counter;
      this.remember(entry.key, rank);
      if (state.waiters.length > 0) this.heap.push({ key: entry.key, rank, seq: state.waiters[0]!.seq });
      else this.keys.delete(entry.key);
      return w;
    }
  }

  remove(w: W): void {
    const state = this.keys.get(this.keyOf(w));
    const i = state ? state.waiters.indexOf(w) : -1;
    if (i < 0) return;
    state!.waiters.splice(i, 1);
    this.count--;
  }

  private remember(key: string, rank: number): void {
    if (this.newKeys !== "least_recent") return;
    this.lastServed.delete(key);
    this.lastServed.set(key, rank);
    if (this.lastServed.size > this.memory) this.lastServed.delete(this.lastServed.keys().next().value!);
  }
}

/** Highest priority first; round-robin by agent within a level. */
export class PriorityQueue<W extends Queued> implements WaitQueue<W> {
  private readonly levels = new Map<number, KeyedQueue<W>>();
  /** Levels in descending order; a handful in practice, so a sorted array is enough. */
  private order: number[] = [];
  private count = 0;

  get size(): number {
    return this.count;
  }

  push(w: W): void {
    let level = this.levels.get(w.priority);
    if (!level) {
      level = new KeyedQueue<W>((x) => x.agentId, "rotation");
      this.levels.set(w.priority, level);
      this.order = [...this.levels.keys()].sort((a, b) => b - a);
    }
    level.push(w);
    this.count++;
  }

  shift(): W | undefined {
    for (const p of this.order) {
      const w = this.levels.get(p)!.shift();
      if (w) {
        this.count--;
        return w;
      }
    }
    return undefined;
  }

  remove(w: W): void {
    const level = this.levels.get(w.priority);
    if (!level) return;
    const before = level.size;
    level.remove(w);
    this.count -= before - level.size;
  }
}

/** Earliest deadline first; calls without one after all that have one; ties in arrival order. */
export class DeadlineQueue<W extends Queued> implements WaitQueue<W> {
  private readonly heap = new MinHeap<W>((a, b) => a.deadline < b.deadline || (a.deadline === b.deadline && a.seq < b.seq));
  /** Removed waiters still in the heap, skipped when they surface. */
  private readonly removed = new Set<W>();

  get size(): number {
    return this.heap.size - this.removed.size;
  }

  push(w: W): void {
    this.heap.push(w);
  }

  shift(): W | undefined {
    for (;;) {
      const w = this.heap.pop();
      if (w === undefined || !this.removed.delete(w)) return w;
    }
  }

  remove(w: W): void {
    this.removed.add(w);
  }
}
