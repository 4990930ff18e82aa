import { checkFormatVersion, KovaError, recordFormat } from "../core/index.js";
import { BucketNotFoundError, bucketName, isStreamNotFound, KvStore, typedNatsError, type KvConnection } from "../bus/index.js";
import { ExperimentStateError } from "./errors.js";
import { readAttemptRecord, readStatusRecord, type AttemptRecord, type StatusRecord } from "./records.js";
import { EXPERIMENT_SPEC_VERSION, specDigest, type ExperimentSpec, type TaskSpec } from "./spec.js";

/**
 * KV bucket `kova_<c>_evals` (docs/evals.md, "Results"): per experiment its expanded spec
 * (tasks in chunks, so a large dataset fits NATS' max_payload), its status, and one record
 * per attempt. Keys are `<experiment>.<kind>[.…]`, so `nats kv watch kova_<c>_evals
 * '<experiment>.attempt.>'` follows one experiment's records.
 */
export function evalsBucket(cluster: string): string {
  return bucketName(cluster, "evals");
}

/** A record of the bucket by its key, named as its kind's reader names it. Every kind is at version 1. */
const EVAL_RECORD_FORMAT = recordFormat<unknown>({
  describe: (key) => {
    const [experimentId, kind, chunk] = key.split(".");
    if (kind === "spec") return `experiment spec ${experimentId}`;
    if (kind === "tasks") return `experiment tasks ${experimentId}.${chunk}`;
    return kind === "status" ? `experiment status ${key}` : `attempt record ${key}`;
  },
  version: EXPERIMENT_SPEC_VERSION,
  readable: [1],
});

/** Bytes of tasks per KV value: well under NATS' default 1 MiB max_payload. */
const TASK_CHUNK_BYTES = 256 * 1024;

const enc = new TextEncoder();

/** The stored spec without its tasks, and how many task chunks follow. */
export interface StoredSpecHead {
  v: number;
  experimentId: string;
  digest: string;
  taskChunks: number;
  spec: Omit<ExperimentSpec, "tasks">;
}

/**
 * A spec as it is stored: its tasks in chunks of at most 256 KiB (so that each fits NATS'
 * max_payload in a request and a KV value), and the head that names them and the digest.
 */
export function specParts(experimentId: string, spec: ExperimentSpec): { head: StoredSpecHead; chunks: TaskSpec[][] } {
  const digest = specDigest(spec);
  const chunks: TaskSpec[][] = [[]];
  let bytes = 0;
  for (const t of spec.tasks) {
    const size = enc.encode(JSON.stringify(t)).length;
    if (bytes + size > TASK_CHUNK_BYTES && chunks.at(-1)!.length > 0) {
      chunks.push([]);
      bytes = 0;
    }
    chunks.at(-1)!.push(t);
    bytes += size;
  }
  const { tasks: _, ...rest } = spec;
  return { head: { v: EXPERIMENT_SPEC_VERSION, experimentId, digest, taskChunks: chunks.length, spec: rest }, chunks };
}

export function attemptKey(r: Pick<AttemptRecord, "experimentId" | "subject" | "task" | "repetition" | "attempt">): string {
  return `${r.experimentId}.attempt.${r.subject}.${r.task}.${r.repetition}.${r.attempt}`;
}

/**
 * An experiment's spec as stored: its head (`<experiment>.spec`) and its task chunks
 * (`<experiment>.tasks.<n>`), checked against the digest the head names.
 * @throws UnsupportedFormatError for a part a newer Kova wrote; KovaError INTERNAL when a chunk is missing or the spec does not match its digest
 */
export function readStoredSpec(experimentId: string, rawHead: unknown, rawChunks: readonly unknown[]): { spec: ExperimentSpec; digest: string } {
  const head = rawHead as StoredSpecHead;
  checkFormatVersion(`experiment spec ${experimentId}`, head?.v, [EXPERIMENT_SPEC_VERSION]);
  const tasks = rawChunks.map((raw, i) => {
    const c = raw as { v?: number; tasks?: TaskSpec[] } | undefined;
    if (c === undefined)
      throw new KovaError("INTERNAL", `experiment ${experimentId}: task chunk ${i} of ${head.taskChunks} is missing from KV`, { data: { experimentId } });
    checkFormatVersion(`experiment tasks ${experimentId}.${i}`, c.v, [EXPERIMENT_SPEC_VERSION]);
    return c.tasks ?? [];
  });
  const spec = { ...head.spec, tasks: tasks.flat() } as ExperimentSpec;
  if (specDigest(spec) !== head.digest) {
    throw new KovaError("INTERNAL", `experiment ${experimentId}: the stored spec does not match its digest (its keys were changed by hand?)`, {
      data: { experimentId },
    });
  }
  return { spec, digest: head.digest };
}

export class EvalStore {
  private constructor(readonly store: KvStore<unknown>) {}

  /**
   * Opens (creating if needed) the bucket: the nodes' store, which writes.
   * @throws JetStream errors when JetStream is unavailable
   */
  static async open(opts: { js: KvConnection; cluster: string; replicas?: number }): Promise<EvalStore> {
    return new EvalStore(await KvStore.open(opts.js, opts.cluster, "evals", EVAL_RECORD_FORMAT, { replicas: opts.replicas }));
  }

  /**
   * The bucket for reading only, as an operator or a gateway reads it (deploy/nats/
   * accounts.conf): keys from the stream's subject list, values from the stream's leader
   * (STREAM.INFO and STREAM.MSG.GET, no consumer, no create). A cluster that never ran an
   * experiment has no bucket: it reads as empty.
   */
  static async reader(opts: { js: KvConnection; cluster: string }): Promise<EvalStore> {
    return new EvalStore(await KvStore.bind(opts.js, opts.cluster, "evals", EVAL_RECORD_FORMAT));
  }

  private async putJson(key: string, value: unknown): Promise<void> {
    await this.store.put(key, value);
  }

  private async getJson(key: string): Promise<unknown> {
    try {
      return (await this.store.get(key))?.value;
    } catch (err) {
      if (isStreamNotFound(err)) return undefined;
      throw typedNatsError(err, `reading ${key} of KV bucket ${this.store.name}`);
    }
  }

  private async entries(filter: string): Promise<Array<[string, unknown]>> {
    try {
      return [...(await this.store.entries({ filter }))].map(([key, e]) => [key, e.value]);
    } catch (err) {
      if (err instanceof BucketNotFoundError) return [];
      throw typedNatsError(err, `listing KV bucket ${this.store.name}`);
    }
  }

  /** Stores an expanded spec: the tasks first, then the head that names them, so a head is never read without its tasks. */
  async putSpec(experimentId: string, spec: ExperimentSpec): Promise<string> {
    const { head, chunks } = specParts(experimentId, spec);
    await Promise.all(chunks.map((c, i) => this.putTasks(experimentId, head.digest, i, c)));
    await this.putHead(head);
    return head.digest;
  }

  /**
   * Stores one chunk of an experiment's tasks, before its head.
   * @throws ExperimentStateError when the experiment already has another spec (an experiment's spec is written once)
   */
  async putTasks(experimentId: string, digest: string, index: number, tasks: readonly TaskSpec[]): Promise<void> {
    if (await this.specWritten(experimentId, digest)) return;
    await this.putJson(`${experimentId}.tasks.${index}`, { v: EXPERIMENT_SPEC_VERSION, tasks });
  }

  /**
   * Stores a spec's head once its tasks are stored, after checking that they are the ones
   * its digest names. A head stored again with the same digest (a start sent again) is a no-op.
   * @throws ExperimentStateError when the experiment already has another spec; KovaError INTERNAL
   *   when a chunk is missing or the spec does not match its digest; UnsupportedFormatError
   */
  async putHead(head: StoredSpecHead): Promise<void> {
    const chunks = await Promise.all(Array.from({ length: head.taskChunks }, (_, i) => this.getJson(`${head.experimentId}.tasks.${i}`)));
    readStoredSpec(head.experimentId, head, chunks);
    if (await this.specWritten(head.experimentId, head.digest)) return;
    // Another start of the same id may win the create: the same spec is no news.
    if ((await this.store.create(`${head.experimentId}.spec`, head)) === undefined && !(await this.specWritten(head.experimentId, head.digest))) {
      throw new ExperimentStateError(head.experimentId, "being stored", "another spec is stored under this id at the same moment");
    }
  }

  /**
   * @returns whether the experiment's head is stored with this digest
   * @throws ExperimentStateError when it is stored with another
   */
  private async specWritten(experimentId: string, digest: string): Promise<boolean> {
    const stored = (await this.getJson(`${experimentId}.spec`)) as { digest?: unknown } | undefined;
    if (stored === undefined) return false;
    if (stored.digest === digest) return true;
    throw new ExperimentStateError(experimentId, "stored with another spec", "an experiment's spec is written once: start a new experiment (another id)");
  }

  /**
   * Reads an experiment's spec back and checks it is the one its digest names.
   * @returns undefined when the experiment has no spec here
   * @throws UnsupportedFormatError for a spec a newer Kova wrote; KovaError INTERNAL when the stored tasks do not match the digest
   */
  async getSpec(experimentId: string): Promise<{ spec: ExperimentSpec; digest: string } | undefined> {
    const head = await this.getJson(`${experimentId}.spec`);
    if (head === undefined) return undefined;
    const n = (head as { taskChunks?: unknown }).taskChunks;
    const chunks = await Promise.all(Array.from({ length: typeof n === "number" ? n : 0 }, (_, i) => this.getJson(`${experimentId}.tasks.${i}`)));
    return readStoredSpec(experimentId, head, chunks);
  }

  putStatus(r: StatusRecord): Promise<void> {
    return this.putJson(`${r.experimentId}.status`, r);
  }

  async getStatus(experimentId: string): Promise<StatusRecord | undefined> {
    const v = await this.getJson(`${experimentId}.status`);
    return v === undefined ? undefined : readStatusRecord(experimentId, v);
  }

  /** Every experiment's status, newest first. */
  async statuses(): Promise<StatusRecord[]> {
    return (await this.entries("*.status"))
      .map(([key, value]) => readStatusRecord(key, value))
      .sort((a, b) => b.createdAt - a.createdAt || a.experimentId.localeCompare(b.experimentId));
  }

  putAttempt(r: AttemptRecord): Promise<void> {
    return this.putJson(attemptKey(r), r);
  }

  async getAttempt(key: Pick<AttemptRecord, "experimentId" | "subject" | "task" | "repetition" | "attempt">): Promise<AttemptRecord | undefined> {
    const v = await this.getJson(attemptKey(key));
    return v === undefined ? undefined : readAttemptRecord(attemptKey(key), v);
  }

  /** Every attempt record of an experiment, by cell then attempt. */
  async attempts(experimentId: string): Promise<AttemptRecord[]> {
    return (await this.entries(`${experimentId}.attempt.>`))
      .map(([key, value]) => readAttemptRecord(key, value))
      .sort((a, b) => a.cell - b.cell || a.attempt - b.attempt);
  }
}
