import type { KV, KvEntry } from "@nats-io/kv";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import { readKvEntries } from "../bus/kv-keys.js";
import type { NatsConnection } from "@nats-io/transport-node";
import { Task, TaskState, type ListTasksRequest, type ListTasksResponse } from "@a2a-js/sdk";
import type { ServerCallContext, TaskStore } from "@a2a-js/sdk/server";
import { RequestMalformedError } from "@a2a-js/sdk/errors";
import { checkFormatVersion } from "../core/format-version.js";
import { isValidId } from "../core/ids.js";
import { encodeJson } from "../node/kv-mirror.js";
import { isCasConflict } from "../node/lease.js";
import { isTerminal, kovaMeta } from "./task-projection.js";

/**
 * The A2A SDK's `TaskStore` on a NATS KV bucket, `kova_<cluster>_gateway_tasks`: one
 * entry per task (key = task id = Kova run id), so every gateway replica reads and writes
 * the same tasks and a restarted gateway finds them all. Entries expire with the bucket's
 * max age (default 7 days, the EVENTS stream's), so the bucket does not grow forever.
 *
 * Tasks are scoped by their owner, the API key name that created them: another key gets
 * "not found", as if the task did not exist.
 */
export interface StoredTask {
  v: number;
  owner: string;
  /** Epoch ms of the last save. */
  updatedAt: number;
  /** The task in A2A's JSON form (`Task.toJSON`). */
  task: unknown;
}

export const STORED_TASK_VERSION = 1;
const DEFAULT_PAGE_SIZE = 50;

export function tasksBucket(cluster: string): string {
  return `kova_${cluster}_gateway_tasks`;
}

/** The owner a call context stands for (the API key's name). */
export function ownerOf(context: ServerCallContext | undefined): string {
  const user = context?.user;
  return user?.isAuthenticated ? user.userName : "anonymous";
}

/** A stored task's record; @throws UnsupportedFormatError for a version this gateway does not read */
function storedTask(taskId: string, e: KvEntry): StoredTask {
  const stored = e.json<StoredTask>();
  checkFormatVersion(`gateway task ${taskId}`, stored?.v, [STORED_TASK_VERSION]);
  return stored;
}

export class NatsTaskStore implements TaskStore {
  private constructor(
    readonly kv: KV,
    private readonly nc: NatsConnection,
    private readonly bucket: string,
  ) {}

  /** Opens (creating when missing) the bucket. */
  static async open(nc: NatsConnection, cluster: string, opts: { replicas?: number; maxAgeMs?: number } = {}): Promise<NatsTaskStore> {
    const bucket = tasksBucket(cluster);
    const kv = await openOrCreateBucket(nc, bucket, {
      history: 1,
      replicas: opts.replicas ?? 1,
      storage: "file",
      ttl: opts.maxAgeMs ?? 7 * 86_400_000,
    });
    return new NatsTaskStore(kv, nc, bucket);
  }

  async save(task: Task, context: ServerCallContext): Promise<void> {
    const owner = kovaMeta(task).owner ?? ownerOf(context);
    const stored: StoredTask = { v: STORED_TASK_VERSION, owner, updatedAt: Date.now(), task: Task.toJSON(task) };
    await this.kv.put(task.id, encodeJson(stored));
  }

  /**
   * Saves a watched task's progress. Two replicas may watch one task (the one that started
   * it and one a client asked): a write never replaces a terminal task, and it is a
   * compare-and-set, so a replica that lags behind cannot undo the end of a task.
   */
  async saveProgress(task: Task): Promise<void> {
    const meta = kovaMeta(task);
    for (let attempt = 0; attempt < 10; attempt++) {
      const e = await this.kv.get(task.id);
      const current = e && e.operation === "PUT" ? e.json<StoredTask>() : undefined;
      if (current && isTerminal(Task.fromJSON(current.task).status?.state)) return;
      const stored: StoredTask = { v: STORED_TASK_VERSION, owner: current?.owner ?? meta.owner, updatedAt: Date.now(), task: Task.toJSON(task) };
      try {
        if (e) await this.kv.update(task.id, encodeJson(stored), e.revision);
        else await this.kv.create(task.id, encodeJson(stored));
        return;
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
    }
  }

  async load(taskId: string, context: ServerCallContext): Promise<Task | undefined> {
    const stored = await this.read(taskId);
    if (!stored || stored.owner !== ownerOf(context)) return undefined;
    return Task.fromJSON(stored.task);
  }

  /** A task whoever owns it (the gateway's own bookkeeping, never a caller's answer). */
  async loadAny(taskId: string): Promise<Task | undefined> {
    const stored = await this.read(taskId);
    return stored ? Task.fromJSON(stored.task) : undefined;
  }

  private async read(taskId: string): Promise<StoredTask | undefined> {
    if (!isValidId(taskId)) return undefined;
    const e = await this.kv.get(taskId);
    return e?.operation === "PUT" ? storedTask(taskId, e) : undefined;
  }

  /**
   * The caller's tasks, newest status first, filtered and paged as A2A's ListTasks says.
   * Reads every entry of the bucket: fine for thousands of tasks; past that, a listing
   * index (a subject per owner) is the next step (docs/gateway.md).
   */
  async list(params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    const owner = ownerOf(context);
    const pageSize = params.pageSize ?? DEFAULT_PAGE_SIZE;
    // An entry this gateway cannot read (a newer format, a key that is no task id) is not listed.
    const all = [...(await readKvEntries(this.nc, this.bucket))].map(([taskId, e]) => {
      try {
        return isValidId(taskId) ? storedTask(taskId, e) : undefined;
      } catch {
        return undefined;
      }
    });
    let tasks = all.filter((s): s is StoredTask => s !== undefined && s.owner === owner).map((s) => Task.fromJSON(s.task));
    if (params.contextId) tasks = tasks.filter((t) => t.contextId === params.contextId);
    if (params.status !== undefined && params.status !== TaskState.TASK_STATE_UNSPECIFIED) tasks = tasks.filter((t) => t.status?.state === params.status);
    if (params.statusTimestampAfter) {
      const after = Date.parse(params.statusTimestampAfter);
      tasks = tasks.filter((t) => t.status?.timestamp !== undefined && Date.parse(t.status.timestamp) > after);
    }
    const key = (t: Task) => `${t.status?.timestamp ?? ""}\u0000${t.id}`;
    tasks.sort((a, b) => key(b).localeCompare(key(a)));
    const totalSize = tasks.length;
    if (params.pageToken) {
      let cursor: string;
      try {
        cursor = Buffer.from(params.pageToken, "base64url").toString("utf8");
      } catch {
        throw new RequestMalformedError("pageToken is not one this gateway issued");
      }
      tasks = tasks.filter((t) => key(t).localeCompare(cursor) < 0);
    }
    const page = tasks.slice(0, pageSize).map((t) => (params.includeArtifacts ? t : { ...t, artifacts: [] }));
    const nextPageToken = tasks.length > page.length ? Buffer.from(key(page[page.length - 1]!), "utf8").toString("base64url") : "";
    return { tasks: page, nextPageToken, pageSize, totalSize };
  }
}
