import { ErrorCode, fromWire, KovaError, toWire, timedPhase } from "../core/index.js";
import { ReplayMismatchError, StepOutcomeUnknownError } from "./errors.js";
import type { StepRecord, TurnRecord } from "./turn-record.js";
import type { StepInfo, StepOptions } from "./types.js";

/**
 * What a write changed: steps' records (their intents or outcomes; several when concurrent
 * steps ended together and share the write), or the turn was cut by a stop.
 */
export type JournalChange = { steps: readonly number[] } | { yielded: true };

/** What a journal needs from its host: durable writes, the lease check and the pause gate. */
export interface JournalIo {
  /**
   * Makes the record durable (the host does `wal.replace`, and appends `change` to the
   * step journal on NATS when it keeps one). No `change`: only values handed out since
   * the last write, which the local record keeps.
   */
  persist(record: TurnRecord, change?: JournalChange): Promise<void>;
  /** @throws LeaseLostError when this node may no longer journal for the actor */
  fence(): Promise<void>;
  /** Resolves when the actor is not paused. */
  gate(): Promise<void>;
  /** The turn's abort: a stop, an interrupt, a kill or a lost lease cuts the turn. */
  readonly signal: AbortSignal;
  now(): number;
  random(): number;
  newId(): string;
}

/**
 * The deterministic replay context of one turn attempt. Values and step results already in
 * the record are handed back in order; new ones are appended. `now`, `random` and `newId`
 * are synchronous, so their new values are made durable with the next step write: any
 * effect that could depend on them is a step, and a step writes before it runs.
 */
export class TurnJournal {
  #clock = 0;
  #random = 0;
  #ids = 0;
  #step = 0;
  #dirty = false;
  /** Writes run one after another: concurrent steps (an agent's parallel tool calls) each persist the record. */
  #writing: Promise<void> = Promise.resolve();
  /** The write that has not started yet: a step ending before it starts joins it. */
  #queued: { steps: number[]; done: Promise<void> } | undefined;
  /** Recorded steps whose function is running (concurrent steps of one turn). */
  #running = 0;

  constructor(
    readonly actorId: string,
    readonly record: TurnRecord,
    private readonly io: JournalIo,
  ) {}

  /** True while recorded steps or values remain to be handed back. */
  get replaying(): boolean {
    const r = this.record;
    return this.#step < r.steps.length || this.#clock < r.clock.length || this.#random < r.random.length || this.#ids < r.ids.length;
  }

  /** True when values were handed out that no write has made durable yet. */
  get dirty(): boolean {
    return this.#dirty;
  }

  now(): number {
    return this.#next(this.record.clock, this.#clock++, () => this.io.now());
  }

  random(): number {
    return this.#next(this.record.random, this.#random++, () => this.io.random());
  }

  newId(): string {
    return this.#next(this.record.ids, this.#ids++, () => this.io.newId());
  }

  /** Index the next `step` call gets. */
  get nextStep(): number {
    return this.#step;
  }

  /** How many steps and values this attempt has taken so far (recorded or new). */
  get consumed(): { steps: number; clock: number; random: number; ids: number } {
    return { steps: this.#step, clock: this.#clock, random: this.#random, ids: this.#ids };
  }

  #next<T>(recorded: T[], index: number, make: () => T): T {
    if (index < recorded.length) return recorded[index]!;
    const value = make();
    recorded.push(value);
    this.#dirty = true;
    return value;
  }

  async step<R>(name: string, fn: (info: StepInfo) => Promise<R> | R, opts: StepOptions = {}): Promise<R> {
    const idempotent = opts.idempotent === true;
    if (opts.record === false && !idempotent) throw new TypeError(`step ${name}: record: false is for idempotent steps only`);
    const index = this.#step++;
    // A hole (null once through the WAL's encoding) is a step with nothing recorded: an
    // idempotent step still running when its turn was cut, next to concurrent ones.
    const recorded = this.record.steps[index] ?? undefined;
    if (recorded !== undefined) {
      if (recorded.name !== name) throw new ReplayMismatchError(this.actorId, index, recorded.name, name);
      if (recorded.status === "done") return recorded.result as R;
      if (recorded.status === "failed") {
        // The last step's failure is what a retry is for, if running it again is safe;
        // any earlier failure was seen (and handled) by the handler, so replay repeats it.
        const last = index === this.record.steps.length - 1;
        if (!(last && idempotent)) throw fromWire(recorded.error) ?? new KovaError(ErrorCode.INTERNAL, `step ${name} failed`);
      } else if (recorded.status === "unknown" || !idempotent) {
        // Recorded as unknown, so every later replay of this turn gives the same answer.
        if (recorded.status !== "unknown") {
          recorded.status = "unknown";
          await this.#write(index);
        }
        throw new StepOutcomeUnknownError(this.actorId, name, index);
      }
      // Otherwise an idempotent step without a result: run it again.
    }
    await this.io.gate();
    await this.io.fence();
    if (opts.record === false) {
      return timedPhase(`step:${name}`, this.actorId, async () => fn(this.#info(index)));
    }
    const entry: StepRecord = { name, status: "started", idempotent };
    this.record.steps[index] = entry;
    // An idempotent step needs no "started" mark: without a result it simply runs again.
    if (!idempotent) await this.#write(index);
    let result: R;
    this.#running++;
    try {
      result = await timedPhase(`step:${name}`, this.actorId, async () => fn(this.#info(index)));
    } catch (err) {
      this.#running--;
      // Cut short by the turn's end (a stop, an interrupt, a kill, a lost lease), not failed
      // on its own: what it did is unknown, so nothing is recorded as its outcome. On replay
      // a non-idempotent step, `started`, is then outcome unknown and an idempotent one runs
      // again, as after a crash; a recorded failure would instead be thrown again.
      if (this.io.signal.aborted) throw err;
      entry.status = "failed";
      entry.error = toWire(err);
      await this.#write(index);
      throw err;
    }
    this.#running--;
    entry.status = "done";
    entry.result = result;
    await this.#write(index);
    return result;
  }

  #info(index: number): StepInfo {
    return { key: `${this.actorId}.${this.record.envelope.id}.${index}`, index, attempt: this.record.attempt };
  }

  /** Writes values handed out since the last write (the host calls it before completing the turn). */
  async flush(): Promise<void> {
    if (this.#dirty) await this.#write();
  }

  #write(step?: number): Promise<void> {
    // Steps may run concurrently (their indices are drawn in call order, so replay is
    // exact), but the host's persist replaces one WAL record by sequence: two at once
    // would both name the same old sequence. Each write persists the latest record, so a
    // step that ends while a write waits to start joins that write: its record is in it.
    const queued = this.#queued;
    if (queued) {
      if (step !== undefined) queued.steps.push(step);
      return queued.done;
    }
    const steps = step === undefined ? [] : [step];
    // With sibling steps still running, the write starts after the I/O callbacks at hand:
    // siblings whose results arrived in the same read (parallel tool calls) end first and
    // share it, one flushed WAL write instead of one each. Alone, it starts at once.
    const start = this.#running > 0 ? this.#writing.then(() => new Promise<void>((r) => setImmediate(r))) : this.#writing;
    const done = start.then(() => {
      this.#queued = undefined;
      this.#dirty = false;
      return this.io.persist(this.record, steps.length === 0 ? undefined : { steps });
    });
    this.#queued = { steps, done };
    this.#writing = done.catch(() => undefined);
    return done;
  }
}
