import { sleep, checkFormatVersion, UnsupportedFormatError, newId, type Logger } from "../core/index.js";
import { decodeValue, encodeValue, isTransientNatsError, isWrongLastSequence, type Bus, isMessageGone } from "../bus/index.js";
import { JournalFencedError, JournalUnavailableError } from "./errors.js";
import type { StepRecord, TurnRecord } from "./turn-record.js";

/** Format version of a journal entry on NATS; old versions keep loading. */
export const JOURNAL_ENTRY_VERSION = 1;
const JOURNAL_ENTRY_READABLE: readonly number[] = [1];

/**
 * One stored journal entry (msgpack) as this build reads it.
 * @param seq its stream sequence, named in the error
 * @throws DecodeError for bytes that are not msgpack; UnsupportedFormatError for an entry a
 *   newer Kova wrote (its turn cannot be resumed here: upgrade this node)
 */
export function readJournalEntry(actorId: string, seq: number, data: Uint8Array): JournalEntry {
  const what = `step-journal entry #${seq} of actor ${actorId}`;
  const e = decodeValue(data, "msgpack", { maxBytes: Number.MAX_SAFE_INTEGER, maxDepth: 256 }, what) as JournalEntry;
  checkFormatVersion(what, e?.v, JOURNAL_ENTRY_READABLE);
  return e;
}

/**
 * - `claim`: a host took the journal over (written before its first turn there); a rollup
 *   when no turn is open, so an actor's subject never grows with moves;
 * - `intent`: a non-idempotent step is about to run;
 * - `result`: a step's outcome (done, failed, or unknown after a takeover);
 * - `yield`: a stop cut the turn on purpose (resuming it is not a new attempt);
 * - `turn_done`: the turn's checkpoint is saved; a rollup that purges the turn's entries.
 *   Written by earlier builds after every turn; this one no longer writes it (the next
 *   turn's first entry is the rollup, and a turn the checkpoint names is done), but still
 *   reads it.
 */
export type JournalEntryKind = "claim" | "intent" | "result" | "yield" | "turn_done";

/** One message on `kova.<c>.journal.<actorId>` (msgpack). */
export interface JournalEntry {
  v: number;
  k: JournalEntryKind;
  /** The node that wrote it. */
  node: string;
  /** Envelope id of the turn; absent on a claim when no turn was open. */
  turn?: string;
  /** Stream sequence of the turn's first entry: where a reader starts. */
  start?: number;
  attempt?: number;
  /** Step index (intent, result). */
  i?: number;
  step?: StepRecord;
  /** Values handed out by ctx.now/random/newId since the previous entry, with their offsets. */
  vals?: { at: [number, number, number]; clock: number[]; random: number[]; ids: string[] };
}

/** A turn found open in an actor's journal on NATS: what its previous host recorded. */
export interface OpenTurn {
  envelopeId: string;
  /** Stream sequence of its first entry. */
  start: number;
  attempt: number;
  yielded: boolean;
  /** Indexed by step; a hole means that step's entry never reached NATS. */
  steps: StepRecord[];
  clock: number[];
  random: number[];
  ids: string[];
  /** Nodes that wrote its entries, oldest first. */
  nodes: string[];
}

export interface NatsStepJournalOptions {
  bus: Bus;
  nodeId: string;
  log: Logger;
  /** Total time an append or read keeps retrying through a NATS outage (default 30 s). */
  timeoutMs?: number;
}

const ATTEMPT_TIMEOUT_MS = 2_000;
const CLAIM_TRIES = 5;
// Room for the protocol line and headers inside max_payload.
const HEADER_ALLOWANCE = 1024;

/**
 * The actors' step journal on NATS (docs/actors.md, "Step journal on NATS"): stream
 * `KOVA_<C>_JOURNAL`, one subject per actor. The local WAL makes a restart on the same node
 * exact; this makes a takeover by another node exact too. Every append carries
 * `Nats-Expected-Last-Subject-Sequence` = the last sequence this host wrote or read on the
 * actor's subject, so once a new host has claimed the journal, a deposed host's next append
 * fails and its turn stops (storage-level fencing, like a producer epoch).
 */
export class NatsStepJournal {
  readonly #timeoutMs: number;

  constructor(private readonly opts: NatsStepJournalOptions) {
    this.#timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /**
   * Reads the actor's journal and claims it for this host: the open turn its previous host
   * left (if any) is returned by `ActorJournal.openTurn`. `committed` says which turns the
   * actor's checkpoint names (its processed ids): such a turn's entries are spent, not open.
   * @throws JournalUnavailableError when NATS does not answer in time; UnsupportedFormatError
   *   when the journal holds an entry of a version this build does not read
   */
  async open(actorId: string, committed: (envelopeId: string) => boolean = () => false): Promise<ActorJournal> {
    const j = new ActorJournal(actorId, this.opts.bus, this.opts.nodeId, this.opts.log, this.#timeoutMs);
    await j.claim(committed);
    return j;
  }
}

/** Per-turn bookkeeping: where the turn starts on NATS and how many values NATS already has. */
interface TurnCursor {
  envelopeId: string;
  start: number | undefined;
  sent: [number, number, number];
  /** Steps whose outcome NATS has (so a resumed turn re-sends only what is missing). */
  synced: Set<number>;
}

/** One actor's journal on NATS, as seen by the host that claimed it. Appends are serialized. */
export class ActorJournal {
  readonly #subject: string;
  readonly #stream: string;
  #last = 0;
  #open: OpenTurn | undefined;
  #turn: TurnCursor | undefined;
  #chain: Promise<unknown> = Promise.resolve();

  constructor(
    readonly actorId: string,
    private readonly bus: Bus,
    private readonly nodeId: string,
    private readonly log: Logger,
    private readonly timeoutMs: number,
  ) {
    this.#subject = bus.subjects.journal(actorId);
    this.#stream = bus.subjects.streams.journal;
  }

  /** The open turn found at the claim, while it has not been resumed or closed. */
  openTurn(envelopeId?: string): OpenTurn | undefined {
    const open = this.#open;
    return open && (envelopeId === undefined || open.envelopeId === envelopeId) ? open : undefined;
  }

  /** Reads the subject and appends a claim, retried while another host keeps writing. */
  async claim(committed: (envelopeId: string) => boolean = () => false): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const last = await this.#read(() => this.#lastEntry(), "read");
      if (last === undefined) {
        this.#last = 0;
        this.#open = undefined;
        return; // nothing was ever journaled: nobody to fence
      }
      this.#last = last.seq;
      // The last turn's entries stay until the next turn's first entry rolls them up: a turn
      // the checkpoint names is done (a `turn_done`, from an earlier build, says so too).
      const done = last.entry.k === "turn_done" || last.entry.turn === undefined || committed(last.entry.turn);
      const open = done ? undefined : await this.#read(() => this.#readTurn(last.entry, last.seq), "read");
      try {
        const entry: JournalEntry = { v: JOURNAL_ENTRY_VERSION, k: "claim", node: this.nodeId };
        if (open) Object.assign(entry, { turn: open.envelopeId, start: open.start, attempt: open.attempt });
        await this.#append(entry, { rollup: open === undefined });
        this.#open = open;
        if (open)
          this.log.info(
            { actorId: this.actorId, envelopeId: open.envelopeId, steps: open.steps.length, from: open.nodes },
            "took over an open turn from the step journal",
          );
        return;
      } catch (err) {
        if (!(err instanceof JournalFencedError) || attempt >= CLAIM_TRIES) throw err;
      }
    }
  }

  /**
   * Starts journaling a turn: a fresh one, or one resumed from `open` (this host's own
   * open turn, or its previous host's). Entries the local record has and NATS lacks (a
   * same-node restart whose last NATS append was lost) are appended with the next write.
   */
  begin(envelopeId: string): void {
    const open = this.openTurn(envelopeId);
    this.#turn = {
      envelopeId,
      start: open?.start,
      sent: open ? [open.clock.length, open.random.length, open.ids.length] : [0, 0, 0],
      synced: new Set(open ? open.steps.flatMap((s, i) => (s && s.status !== "started" ? [i] : [])) : []),
    };
  }

  /**
   * Appends what a step write changed: its intent (a started non-idempotent step) or its
   * outcome, with the values handed out since the last entry.
   * @throws JournalFencedError when another host wrote since (this host is deposed);
   *   JournalUnavailableError when NATS does not answer in time
   */
  async step(record: TurnRecord, index: number): Promise<void> {
    const turn = this.#cursor(record);
    // Outcomes NATS lacks before this one (a resumed turn): one entry each, in order.
    for (let i = 0; i < index; i++) {
      const s = record.steps[i];
      if (s && s.status !== "started" && !turn.synced.has(i)) await this.#stepEntry(record, turn, i);
    }
    await this.#stepEntry(record, turn, index);
  }

  /** Best effort: marks the open turn as cut by a stop, so its next host does not count a crashed attempt. */
  async yielded(record: TurnRecord): Promise<void> {
    const turn = this.#cursor(record);
    if (turn.start === undefined) return; // nothing journaled: the next host starts afresh anyway
    await this.#append(this.#entry("yield", record, turn));
  }

  /**
   * Closes the turn after its checkpoint is saved. Nothing is written: the checkpoint names
   * the turn, which is how a reader knows it is done (a `turn_done` entry per turn was one
   * more JetStream write and purge per turn), and the actor's next turn's first entry is a
   * rollup that purges these entries. Until then the subject holds one spent turn.
   */
  done(envelopeId: string): void {
    if (this.#turn?.envelopeId === envelopeId) this.#turn = undefined;
    if (this.openTurn(envelopeId)) this.#open = undefined;
  }

  #cursor(record: TurnRecord): TurnCursor {
    if (this.#turn?.envelopeId !== record.envelope.id) this.begin(record.envelope.id);
    return this.#turn!;
  }

  async #stepEntry(record: TurnRecord, turn: TurnCursor, index: number): Promise<void> {
    let step = record.steps[index]!;
    const entry = this.#entry(step.status === "started" ? "intent" : "result", record, turn);
    entry.i = index;
    entry.step = step;
    let data = encodeValue(entry);
    if (data.length > this.bus.maxPayload - HEADER_ALLOWANCE) {
      // A result too large for one NATS message: recorded as started, so a takeover re-runs
      // the step if it is idempotent and reports it unknown otherwise (docs/actors.md).
      step = { name: step.name, status: "started", idempotent: step.idempotent };
      entry.k = "intent";
      entry.step = step;
      data = encodeValue(entry);
      this.log.warn(
        { actorId: this.actorId, step: step.name, bytes: data.length },
        "step result too large for the NATS journal; a takeover re-runs or reports this step",
      );
    }
    // A fresh turn's first entry carries no `start` (its own sequence is the start) and rolls
    // up the subject: the previous turns' entries are spent (their checkpoint is saved, or
    // their message gone: the next message is never delivered while one is un-acked). A
    // turn resumed from NATS has its `start` and purges nothing.
    const seq = await this.#append(entry, { data, rollup: turn.start === undefined });
    turn.start ??= seq;
    if (step.status !== "started") turn.synced.add(index);
  }

  #entry(k: JournalEntryKind, record: TurnRecord, turn: TurnCursor): JournalEntry {
    const [c, r, i] = turn.sent;
    const entry: JournalEntry = { v: JOURNAL_ENTRY_VERSION, k, node: this.nodeId, turn: record.envelope.id, attempt: record.attempt };
    if (turn.start !== undefined) entry.start = turn.start;
    if (record.clock.length > c || record.random.length > r || record.ids.length > i) {
      entry.vals = { at: [c, r, i], clock: record.clock.slice(c), random: record.random.slice(r), ids: record.ids.slice(i) };
      turn.sent = [record.clock.length, record.random.length, record.ids.length];
    }
    return entry;
  }

  /** Appends after every earlier append of this actor, fenced on the last sequence seen; resolves with its sequence. */
  #append(entry: JournalEntry, opts: { rollup?: boolean; data?: Uint8Array } = {}): Promise<number> {
    const run = async (): Promise<number> => {
      const ack = await this.#publish(opts.data ?? encodeValue(entry), opts.rollup === true);
      this.#last = ack.seq;
      return ack.seq;
    };
    const p = this.#chain.then(run, run);
    this.#chain = p.catch(() => undefined);
    return p;
  }

  async #publish(data: Uint8Array, rollup: boolean): Promise<{ seq: number }> {
    const expected = this.#last;
    // A retry of an append whose ack was lost is a duplicate (same id), not a second entry;
    // an id per append, never per (actor, sequence): a deposed host's append must not pass
    // for the new host's.
    const fence = { msgId: newId(), expectLastSubjectSequence: expected, rollup, timeoutMs: ATTEMPT_TIMEOUT_MS };
    const copy = data.slice();
    const started = performance.now();
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.bus.publishToStream(this.#subject, copy, fence);
      } catch (err) {
        if (isWrongLastSequence(err)) throw new JournalFencedError(this.actorId, expected, err);
        if (!isTransientNatsError(err) || performance.now() - started > this.timeoutMs) throw new JournalUnavailableError(this.actorId, "written", err);
        this.log.debug({ err, actorId: this.actorId, attempt }, "step journal append not acknowledged; retrying");
        await sleep(Math.min(50 * 2 ** Math.min(attempt, 5), 1_000));
      }
    }
  }

  async #read<T>(fn: () => Promise<T>, what: string): Promise<T> {
    const started = performance.now();
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn();
      } catch (err) {
        // An entry a newer Kova wrote: NATS answered, this build cannot read it (not an outage).
        if (err instanceof UnsupportedFormatError) throw err;
        if (!isTransientNatsError(err) || performance.now() - started > this.timeoutMs) throw new JournalUnavailableError(this.actorId, what, err);
        await sleep(Math.min(50 * 2 ** Math.min(attempt, 5), 1_000));
      }
    }
  }

  async #lastEntry(): Promise<{ seq: number; entry: JournalEntry } | undefined> {
    const m = await this.#get({ last_by_subj: this.#subject });
    return m ? { seq: m.seq, entry: this.#decode(m) } : undefined;
  }

  /** The entries of the turn that `last` belongs to, from its first entry up to `lastSeq`. */
  async #readTurn(last: JournalEntry, lastSeq: number): Promise<OpenTurn> {
    const envelopeId = last.turn!;
    const start = last.start ?? lastSeq;
    const open: OpenTurn = { envelopeId, start, attempt: 1, yielded: false, steps: [], clock: [], random: [], ids: [], nodes: [] };
    for (let seq = start; seq <= lastSeq; ) {
      // next_by_subj: the first entry of this subject at or after `seq` (2.9+).
      const m = await this.#get({ seq, next_by_subj: this.#subject } as unknown as { seq: number });
      if (!m || m.seq > lastSeq) break;
      apply(open, this.#decode(m));
      seq = m.seq + 1;
    }
    return open;
  }

  async #get(query: { seq: number } | { last_by_subj: string }): Promise<{ seq: number; data: Uint8Array } | null> {
    try {
      return await this.bus.jsm.streams.getMessage(this.#stream, query);
    } catch (err) {
      if (isMessageGone(err)) return null;
      throw err;
    }
  }

  #decode(m: { seq: number; data: Uint8Array }): JournalEntry {
    return readJournalEntry(this.actorId, m.seq, m.data);
  }
}

/** Folds one entry into the open turn it belongs to (entries of other turns are skipped). */
function apply(open: OpenTurn, e: JournalEntry): void {
  if (e.turn !== open.envelopeId) return;
  if (open.nodes.at(-1) !== e.node) open.nodes.push(e.node);
  if (e.attempt !== undefined) open.attempt = Math.max(open.attempt, e.attempt);
  if (e.vals) {
    const [c, r, i] = e.vals.at;
    open.clock.splice(c, e.vals.clock.length, ...e.vals.clock);
    open.random.splice(r, e.vals.random.length, ...e.vals.random);
    open.ids.splice(i, e.vals.ids.length, ...e.vals.ids);
  }
  if (e.step && e.i !== undefined) open.steps[e.i] = e.step;
  // A yield is only the last word if nothing ran after it.
  open.yielded = e.k === "yield" ? true : e.k === "claim" ? open.yielded : false;
}
