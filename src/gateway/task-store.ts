import type { KV, KvEntry } from "@nats-io/kv";
import { openOrCreateBucket } from "../bus/kv-buckets.js";
import { readKvEntries } from "../bus/kv-keys.js";
import type { NatsConnection } from "@nats-io/transport-node";
import { Task, TaskState, type ListTasksRequest, type ListTasksResponse } from "@a2a-js/sdk";
import type { ServerCallContext, TaskStore } from "@a2a-js/sdk/server";
import { RequestMalformedError } from "@a2a-js/sdk/errors";
import { checkFormatVersion } from "../core/format-version.js";
import { isValidId } from "../core/ids.js";
import { ANONYMOUS_PRINCIPAL } from "../core/principals.js";
import { encodeJson } from "../node/kv-mirror.js";
import { isCasConflict } from "../node/lease.js";
import { isTerminal, kovaMeta } from "./task-projection.js";

/**
 * The A2A SDK's `TaskStore` on a NATS KV bucket, `kova_<cluster>_gateway_tasks`: one
 * entry per task (key = task id = Kova run id), so every gateway replica reads and writes
 * the same tasks and a restarted gateway finds them all. Entries expire with the bucket's
 * max age (default 7 days, the EVENTS stream's), so the bucket does not grow forever.
 *
 * Tasks are scoped by their owner, the principal that created them (the API key's id,
 * `key:<id>`, never its name: a key removed and added again under its name is another
 * principal): another key gets "not found", as if the task did not exist. The owner is
 * the key's first token (`<owner>.<task id>`), so a key's listing reads its own tasks
 * only, however many other keys have. (Older gateways keyed a task by its bare id, and
 * owned it by the key's name; such entries are still read for `anonymous`, and expire
 * with the bucket's max age.)
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

/**
 * The KV key of a task: `<owner>.<task id>`. An owner that is not one key token (a
 * principal id `key:<id>` is not; `anonymous` is) is written as `=` and its base64url
 * form, which no valid name starts with.
 */
export function taskKey(owner: string, taskId: string): string {
  const token = isValidId(owner) ? owner : `=${Buffer.from(owner, "utf8").toString("base64url")}`;
  return `${token}.${taskId}`;
}

/** The owner a call context stands for: its principal's id (a2a-handler.ts, KeyUser). */
export function ownerOf(context: ServerCallContext | undefined): string {
  const user = context?.user as { isAuthenticated?: boolean; principal?: { id?: unknown } } | undefined;
  return user?.isAuthenticated && typeof user.principal?.id === "string" ? user.principal.id : ANONYMOUS_PRINCIPAL;
}

/**
 * A stored task as this build reads it.
 * @throws UnsupportedFormatError for a version this gateway does not read
 */
export function readStoredTask(taskId: string, value: unknown): StoredTask {
  const stored = value as StoredTask;
  checkFormatVersion(`gateway task ${taskId}`, stored?.v, [STORED_TASK_VERSION]);
  return stored;
}

function storedTask(taskId: string, e: KvEntry): StoredTask {
  return readStoredTask(taskId, e.json<unknown>());
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
    await this.kv.put(taskKey(owner, task.id), encodeJson(stored));
  }

  /**
   * Saves a watched task's progress. Two replicas may watch one task (the one that started
   * it and one a client asked): a write never replaces a terminal task, and it is a
   * compare-and-set, so a replica that lags behind cannot undo the end of a task.
   * @throws UnsupportedFormatError when a newer gateway stored the task (it is not overwritten)
   */
  async saveProgress(task: Task): Promise<void> {
    const owner = kovaMeta(task).owner ?? ownerOf(undefined);
    const key = taskKey(owner, task.id);
    for (let attempt = 0; attempt < 10; attempt++) {
      const e = await this.kv.get(key);
      // Not under its owner yet: maybe an older gateway's task, stored under its bare id.
      const found = e ?? (await this.kv.get(task.id));
      const current = found && found.operation === "PUT" ? storedTask(task.id, found) : undefined;
      if (current && isTerminal(Task.fromJSON(current.task).status?.state)) return;
      const stored: StoredTask = { v: STORED_TASK_VERSION, owner, updatedAt: Date.now(), task: Task.toJSON(task) };
      try {
        if (e) await this.kv.update(key, encodeJson(stored), e.revision);
        else await this.kv.create(key, encodeJson(stored));
        return;
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
    }
  }

  async load(taskId: string, context: ServerCallContext): Promise<Task | undefined> {
    if (!isValidId(taskId)) return undefined;
    const owner = ownerOf(context);
    // An entry from before owner-first keys, stored under the bare task id.
    const stored = (await this.read(taskKey(owner, taskId), taskId)) ?? (await this.read(taskId, taskId));
    if (!stored || stored.owner !== owner) return undefined;
    return Task.fromJSON(stored.task);
  }

  private async read(key: string, taskId: string): Promise<StoredTask | undefined> {
    const e = await this.kv.get(key);
    return e?.operation === "PUT" ? storedTask(taskId, e) : undefined;
  }

  /**
   * The caller's tasks, newest status first, filtered and paged as A2A's ListTasks says.
   * Reads the caller's own entries (the keys under its owner token), and entries from
   * before that layout (one-token keys, until they expire).
   */
  async list(params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    const owner = ownerOf(context);
    const pageSize = params.pageSize ?? DEFAULT_PAGE_SIZE;
    const [own, older] = await Promise.all([
      readKvEntries(this.nc, this.bucket, { filter: taskKey(owner, "*") }),
      readKvEntries(this.nc, this.bucket, { filter: "*" }),
    ]);
    // By task id: a task an older gateway stored and a newer one then saved under its owner
    // is listed once, as saved last. An entry this gateway cannot read (a newer format, a
    // key that is no task id) is not listed.
    const byId = new Map<string, StoredTask>();
    for (const [key, e] of [...own, ...older]) {
      const taskId = key.slice(key.indexOf(".") + 1);
      if (byId.has(taskId) || !isValidId(taskId)) continue;
      try {
        const stored = storedTask(taskId, e);
        if (stored.owner === owner) byId.set(taskId, stored);
      } catch {
        // not listed
      }
    }
    let tasks = [...byId.values()].map((s) => Task.fromJSON(s.task));
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
