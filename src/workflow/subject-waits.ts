import { createHash } from "node:crypto";
import { DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import { listKvKeys, readKvEntries } from "../bus/kv-keys.js";
import { KovaTimeoutError } from "../core/errors.js";
import { checkFormatVersion } from "../core/format-version.js";
import { componentLogger, silentLogger, type Logger } from "../core/logger.js";
import { isStreamNotFound, isSubjectOverlap, isWrongLastSequence } from "../bus/index.js";
import { followBucket } from "./kv-watch.js";

/**
 * Waits on a NATS subject (`wait for = "event"` with `subject = "…"`, docs/workflows.md).
 *
 * A run's node may be down, or the run between turns, when the message comes, and core
 * NATS keeps nothing for an absent subscriber. So the subject is **captured by a stream**
 * from the turn in which the wait begins, and read from there by whichever node hosts the
 * run, as often as the run moves:
 *
 * - a subject some stream already stores (Kova's EVENTS stream for `kova.<c>.events.…`, or an
 *   application's own stream) is read from that stream;
 * - any other subject is added to `KOVA_<C>_WAITS` (limits retention, 7 days), and removed
 *   again when no wait names it any more;
 * - the wait is a KV entry (`kova_<c>_workflow_waits`, key `<hash(subject)>.<runId>.<waitId>`)
 *   holding the stream and the first sequence that counts (its last sequence + 1 when the
 *   wait began, so an older message on a shared subject does not end a new wait);
 * - every node watches the bucket and, for the runs it hosts, reads the first message at or
 *   after that sequence with an ordered consumer (server memory only while a wait is open on
 *   a live host), then sends it to the run as a `workflow.signal` whose message id is derived
 *   from the wait, so two nodes that both read it store one message.
 *
 * Changing a stream's subject list is read-modify-write with no compare-and-set in the
 * JetStream API: two nodes adding subjects at once could each drop the other's. Every
 * change of `KOVA_<C>_WAITS` is therefore made under a lock (a KV key created with
 * compare-and-set; taken over when its holder has not released it for `LOCK_STALE_MS`),
 * and a wait's entry is written under the same lock, so a subject is never removed while a
 * wait that needs it is being set up.
 */

/** One open wait. */
export interface SubjectWaitEntry {
  runId: string;
  waitId: string;
  subject: string;
  /** The stream that stores the subject. */
  stream: string;
  /** The first sequence that may end the wait. */
  startSeq: number;
}

/** Format version of a stored wait (waits written before versioning have no `v`: version 1). */
export const SUBJECT_WAIT_VERSION = 1;
const READABLE: readonly number[] = [1];

/**
 * A stored wait as this build reads it.
 * @throws UnsupportedFormatError for a wait a newer Kova wrote
 */
export function readSubjectWait(key: string, value: unknown): SubjectWaitEntry {
  const s = value as (SubjectWaitEntry & { v?: number }) | null;
  checkFormatVersion(`workflow wait ${key}`, s?.v, READABLE);
  return { runId: s!.runId, waitId: s!.waitId, subject: s!.subject, stream: s!.stream, startSeq: s!.startSeq };
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const LOCK_KEY = "capture-lock";
/** A lock older than this is taken over (its holder died); a stream update takes milliseconds. */
const LOCK_STALE_MS = 15_000;
const LOCK_WAIT_MS = 30_000;
const WAITS_MAX_AGE_MS = 7 * 24 * 60 * 60 * 1000;

export function waitsBucket(cluster: string): string {
  return `kova_${cluster}_workflow_waits`;
}

export function waitsStream(cluster: string): string {
  return `KOVA_${cluster.toUpperCase()}_WAITS`;
}

function subjectKey(subject: string): string {
  return createHash("sha256").update(subject).digest("hex").slice(0, 16);
}

function keyOf(e: Pick<SubjectWaitEntry, "subject" | "runId" | "waitId">): string {
  return `${subjectKey(e.subject)}.${e.runId}.${e.waitId}`;
}

/** The data of a message that ends a wait: its JSON value, or its text. */
export function messageData(bytes: Uint8Array): unknown {
  const text = dec.decode(bytes);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

export class SubjectWaits {
  private constructor(
    readonly kv: KV,
    private readonly jsm: JetStreamManager,
    readonly js: JetStreamClient,
    private readonly bucket: string,
    private readonly stream: string,
    private readonly replicas: number,
    private readonly owner: string,
  ) {}

  /**
   * Opens (creating if needed) the waits bucket.
   * @throws JetStream errors when JetStream is unavailable
   */
  static async open(opts: { js: JetStreamClient; jsm: JetStreamManager; cluster: string; replicas?: number; owner: string }): Promise<SubjectWaits> {
    const bucket = waitsBucket(opts.cluster);
    const kv = await openOrCreateBucket(opts.js, bucket, { history: 1, replicas: opts.replicas ?? 1, storage: "file" });
    return new SubjectWaits(kv, opts.jsm, opts.js, bucket, waitsStream(opts.cluster), opts.replicas ?? 1, opts.owner);
  }

  /**
   * Begins a wait: the subject is captured from now on and the wait recorded. Idempotent: a
   * turn re-run after a crash gets the entry of its first try (same start sequence).
   * @throws KovaTimeoutError when the capture lock stays taken; JetStream errors
   */
  async begin(w: { runId: string; waitId: string; subject: string }): Promise<SubjectWaitEntry> {
    const key = keyOf(w);
    const existing = await this.read(key);
    if (existing) return existing;
    return this.locked(async () => {
      const again = await this.read(key);
      if (again) return again;
      const entry: SubjectWaitEntry = { ...w, ...(await this.capture(w.subject)) };
      await this.kv.put(key, enc.encode(JSON.stringify({ v: SUBJECT_WAIT_VERSION, ...entry })));
      return entry;
    });
  }

  /** Ends a wait; its subject leaves KOVA_<C>_WAITS when no other wait names it. */
  async end(w: { runId: string; waitId: string; subject: string }): Promise<void> {
    await this.kv.delete(keyOf(w));
    await this.release(w.subject);
  }

  /** Ends every wait of a run (it ended). */
  async clear(runId: string): Promise<number> {
    const entries = [...(await readKvEntries(this.js, this.bucket, { filter: `*.${runId}.*` }))].map(([key, e]) => readSubjectWait(key, e.json<unknown>()));
    for (const e of entries) await this.end(e);
    return entries.length;
  }

  private async read(key: string): Promise<SubjectWaitEntry | undefined> {
    const e = await this.kv.get(key);
    return e && e.operation === "PUT" ? readSubjectWait(key, e.json<unknown>()) : undefined;
  }

  /** The stream storing `subject` (adding it to KOVA_<C>_WAITS if none does) and the sequence its next message gets. Under the lock. */
  private async capture(subject: string): Promise<{ stream: string; startSeq: number }> {
    for (let attempt = 0; ; attempt++) {
      const names: string[] = [];
      for await (const n of this.jsm.streams.names(subject)) names.push(...(Array.isArray(n) ? n : [n]));
      const holder = names.find((n) => n === this.stream) ?? names[0];
      if (holder !== undefined) {
        const info = await this.jsm.streams.info(holder);
        return { stream: holder, startSeq: info.state.last_seq + 1 };
      }
      try {
        const info = await this.jsm.streams.info(this.stream).catch((err: unknown) => {
          if (isStreamNotFound(err)) return undefined;
          throw err;
        });
        if (info) {
          await this.jsm.streams.update(this.stream, { ...info.config, subjects: [...(info.config.subjects ?? []), subject] });
          return { stream: this.stream, startSeq: info.state.last_seq + 1 };
        }
        await this.jsm.streams.add({
          name: this.stream,
          subjects: [subject],
          retention: RetentionPolicy.Limits,
          storage: StorageType.File,
          num_replicas: this.replicas,
          max_age: nanos(WAITS_MAX_AGE_MS),
          discard: DiscardPolicy.Old,
        });
        return { stream: this.stream, startSeq: 1 };
      } catch (err) {
        // Another stream began storing the subject meanwhile: read it from there.
        if (!isSubjectOverlap(err) || attempt > 2) throw err;
      }
    }
  }

  private async release(subject: string): Promise<void> {
    const prefix = subjectKey(subject);
    await this.locked(async () => {
      if ((await listKvKeys(this.js, this.bucket, { filter: `${prefix}.*.*` })).length > 0) return; // still needed
      const info = await this.jsm.streams.info(this.stream).catch((err: unknown) => {
        if (isStreamNotFound(err)) return undefined;
        throw err;
      });
      const subjects = info?.config.subjects ?? [];
      if (!info || !subjects.includes(subject)) return;
      const rest = subjects.filter((s) => s !== subject);
      if (rest.length === 0) await this.jsm.streams.delete(this.stream);
      else await this.jsm.streams.update(this.stream, { ...info.config, subjects: rest });
    });
  }

  /** Runs `fn` holding the capture lock. */
  private async locked<T>(fn: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + LOCK_WAIT_MS;
    const mine = () => enc.encode(JSON.stringify({ owner: this.owner, at: Date.now() }));
    let revision: number | undefined;
    while (revision === undefined) {
      try {
        revision = await this.kv.create(LOCK_KEY, mine());
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
        const held = await this.kv.get(LOCK_KEY);
        if (held && held.operation === "PUT" && Date.now() - held.json<{ at: number }>().at > LOCK_STALE_MS) {
          revision = await this.kv.update(LOCK_KEY, mine(), held.revision).catch((e: unknown) => {
            if (isWrongLastSequence(e)) return undefined;
            throw e;
          });
        }
        if (revision === undefined) {
          if (Date.now() > deadline) throw new KovaTimeoutError("taking the workflow waits' capture lock", LOCK_WAIT_MS, { data: { holder: held?.string() } });
          await new Promise((r) => setTimeout(r, 20 + Math.random() * 30));
        }
      }
    }
    try {
      return await fn();
    } finally {
      await this.kv.delete(LOCK_KEY, { previousSeq: revision }).catch(() => undefined);
    }
  }
}

export interface SubjectWaitServiceOptions {
  waits: SubjectWaits;
  /** Sends the message to the run (`workflow.signal`, message id derived from the wait). */
  fire: (e: SubjectWaitEntry, data: unknown, seq: number) => Promise<void>;
  /** True when this node hosts the run: only its host reads the subject. */
  isLocal: (runId: string) => boolean;
  /** How often hosting is re-checked (runs move between nodes). Default 1 s. */
  recheckMs?: number;
  logger?: Logger;
}

interface Reader {
  stop(): void;
}

/**
 * Reads waited subjects for the runs this node hosts. One per node; the KV watch tells it
 * every open wait, and a reader (an ordered consumer from the wait's start sequence) runs
 * only while the run is hosted here, so a run that moved is read by its new host from the
 * same sequence: nothing published meanwhile is missed.
 */
export class SubjectWaitService {
  readonly #entries = new Map<string, SubjectWaitEntry>();
  readonly #readers = new Map<string, Reader>();
  #stopped = false;
  #watch: { stop(): void } | undefined;
  #timer: NodeJS.Timeout | undefined;
  readonly #log: Logger;

  private constructor(private readonly o: SubjectWaitServiceOptions) {
    this.#log = componentLogger(o.logger ?? silentLogger(), "workflow-waits");
  }

  /** @throws JetStream errors when the watch cannot start */
  static async start(o: SubjectWaitServiceOptions): Promise<SubjectWaitService> {
    const svc = new SubjectWaitService(o);
    svc.#watch = await followBucket<SubjectWaitEntry>(
      o.waits.kv,
      "*.*.*",
      {
        decode: readSubjectWait,
        onPut: (key, e) => {
          svc.#entries.set(key, e);
          svc.#reconcile();
        },
        onDelete: (key) => {
          svc.#entries.delete(key);
          svc.#reconcile();
        },
      },
      svc.#log,
    );
    svc.#timer = setInterval(() => svc.#reconcile(), o.recheckMs ?? 1000);
    svc.#timer.unref();
    return svc;
  }

  /** Waits read here now (their runs are hosted here). */
  reading(): string[] {
    return [...this.#readers.keys()];
  }

  #reconcile(): void {
    if (this.#stopped) return;
    for (const [key, r] of this.#readers) {
      const e = this.#entries.get(key);
      if (!e || !this.o.isLocal(e.runId)) {
        r.stop();
        this.#readers.delete(key);
      }
    }
    for (const [key, e] of this.#entries) {
      if (!this.#readers.has(key) && this.o.isLocal(e.runId)) this.#readers.set(key, this.#read(key, e));
    }
  }

  #read(key: string, e: SubjectWaitEntry): Reader {
    let stopped = false;
    let messages: { stop(): void } | undefined;
    const reader = {
      stop: () => {
        stopped = true;
        messages?.stop();
      },
    };
    void (async () => {
      while (!stopped) {
        try {
          const consumer = await this.o.waits.js.consumers.get(e.stream, {
            filter_subjects: e.subject,
            deliver_policy: DeliverPolicy.StartSequence,
            opt_start_seq: e.startSeq,
          });
          const iter = await consumer.consume({ max_messages: 1 });
          messages = iter;
          if (stopped) iter.stop();
          for await (const m of iter) {
            await this.o.fire(e, messageData(m.data), m.seq);
            iter.stop();
            // Sent: the run's turn ends the wait and deletes the entry; the reader stays
            // stopped (not removed) so the same message is not sent again meanwhile.
            stopped = true;
          }
        } catch (err) {
          if (stopped) return;
          this.#log.warn({ err, wait: key }, "could not read a waited subject; retrying");
          await new Promise((r) => setTimeout(r, 1000));
        }
      }
    })();
    return reader;
  }

  stop(): void {
    this.#stopped = true;
    if (this.#timer) clearInterval(this.#timer);
    this.#watch?.stop();
    for (const r of this.#readers.values()) r.stop();
    this.#readers.clear();
  }

  [Symbol.dispose](): void {
    this.stop();
  }
}
