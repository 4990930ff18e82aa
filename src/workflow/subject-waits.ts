import { createHash } from "node:crypto";
import { KvStore, SubjectCapture, subjectsFor, type JetStreamAccess } from "../bus/index.js";
import { recordFormat, componentLogger, silentLogger, type Logger } from "../core/index.js";

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
 * The capture stream is changed under a lock (bus SubjectCapture, KvStore.locked), and a
 * wait's entry is written under the same lock, so a subject is never removed while a wait
 * that needs it is being set up.
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

export const SUBJECT_WAIT_FORMAT = recordFormat<SubjectWaitEntry>({
  describe: (key) => `workflow wait ${key}`,
  version: SUBJECT_WAIT_VERSION,
  readable: [1],
  read: (_key, value) => {
    const s = value as SubjectWaitEntry;
    return { runId: s.runId, waitId: s.waitId, subject: s.subject, stream: s.stream, startSeq: s.startSeq };
  },
});

const dec = new TextDecoder();
/** The lock every change of the capture stream is made under (KvStore.locked). */
const LOCK_KEY = "capture-lock";
/** A lock older than this is taken over (its holder died); a stream update takes milliseconds. */
const LOCK = { staleMs: 15_000, waitMs: 30_000, what: "taking the workflow waits' capture lock" };

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
    readonly store: KvStore<SubjectWaitEntry>,
    readonly capture: SubjectCapture,
    private readonly owner: string,
  ) {}

  /**
   * Opens (creating if needed) the waits bucket.
   * @param opts.nats JetStream (the node's Bus)
   * @throws JetStream errors when JetStream is unavailable
   */
  static async open(opts: { nats: JetStreamAccess; cluster: string; replicas?: number; owner: string }): Promise<SubjectWaits> {
    const store = await KvStore.open(opts.nats.js, opts.cluster, "workflowWaits", SUBJECT_WAIT_FORMAT, { replicas: opts.replicas });
    return new SubjectWaits(store, new SubjectCapture(opts.nats, subjectsFor(opts.cluster).streams.waits, opts.replicas), opts.owner);
  }

  /**
   * Begins a wait: the subject is captured from now on and the wait recorded. Idempotent: a
   * turn re-run after a crash gets the entry of its first try (same start sequence).
   * @throws KovaTimeoutError when the capture lock stays taken; JetStream errors
   */
  async begin(w: { runId: string; waitId: string; subject: string }): Promise<SubjectWaitEntry> {
    const key = keyOf(w);
    const existing = await this.store.get(key);
    if (existing) return existing.value;
    return this.store.locked(
      LOCK_KEY,
      this.owner,
      async () => {
        const again = await this.store.get(key);
        if (again) return again.value;
        const entry: SubjectWaitEntry = { ...w, ...(await this.capture.capture(w.subject)) };
        await this.store.put(key, entry);
        return entry;
      },
      LOCK,
    );
  }

  /** Ends a wait; its subject leaves KOVA_<C>_WAITS when no other wait names it. */
  async end(w: { runId: string; waitId: string; subject: string }): Promise<void> {
    await this.store.delete(keyOf(w));
    await this.store.locked(
      LOCK_KEY,
      this.owner,
      async () => {
        if ((await this.store.keys({ filter: `${subjectKey(w.subject)}.*.*` })).length === 0) await this.capture.release(w.subject);
      },
      LOCK,
    );
  }

  /** Ends every wait of a run (it ended). */
  async clear(runId: string): Promise<number> {
    const entries = [...(await this.store.entries({ filter: `*.${runId}.*` })).values()];
    for (const e of entries) await this.end(e.value);
    return entries.length;
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

/**
 * Reads waited subjects for the runs this node hosts. One per node; the KV watch tells it
 * every open wait, and a reader (an ordered consumer from the wait's start sequence) runs
 * only while the run is hosted here, so a run that moved is read by its new host from the
 * same sequence: nothing published meanwhile is missed.
 */
export class SubjectWaitService {
  readonly #entries = new Map<string, SubjectWaitEntry>();
  readonly #readers = new Map<string, { stop(): void }>();
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
    const changed = (key: string, e?: SubjectWaitEntry) => {
      if (e) svc.#entries.set(key, e);
      else svc.#entries.delete(key);
      svc.#reconcile();
    };
    svc.#watch = await o.waits.store.follow("*.*.*", { onPut: changed, onDelete: changed }, svc.#log);
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
      if (this.#readers.has(key) || !this.o.isLocal(e.runId)) continue;
      // Sent, the run's turn ends the wait and deletes the entry; the reader stays stopped
      // (not removed) meanwhile, so the same message is not sent again.
      this.#readers.set(
        key,
        this.o.waits.capture.readFirst(e, (data, seq) => this.o.fire(e, messageData(data), seq), this.#log.child({ wait: key })),
      );
    }
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
