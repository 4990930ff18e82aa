import { Task, TaskState, type ListTasksRequest, type ListTasksResponse } from "@a2a-js/sdk";
import type { ServerCallContext, TaskStore } from "@a2a-js/sdk/server";
import { RequestMalformedError } from "@a2a-js/sdk/errors";
import { BusErrorCode, KvStore, type Bus, type NatsConnection } from "../bus/index.js";
import { isKovaError, recordFormat, isValidId, ANONYMOUS_PRINCIPAL } from "../core/index.js";
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

export const STORED_TASK_FORMAT = recordFormat<StoredTask>({
  // A key is `<owner>.<task id>`, or an older gateway's bare task id.
  describe: (key) => `gateway task ${key.slice(key.indexOf(".") + 1)}`,
  version: STORED_TASK_VERSION,
  readable: [STORED_TASK_VERSION],
});

export class NatsTaskStore implements TaskStore {
  private constructor(readonly store: KvStore<StoredTask>) {}

  /**
   * Opens (creating when missing) the bucket. With `bus` (the gateway's), the saves of a
   * task's start and end go through its request mux (see KvStoreOptions.bus).
   */
  static async open(
    nc: NatsConnection,
    cluster: string,
    opts: { replicas?: number; maxAgeMs?: number; bus?: Pick<Bus, "publishToStream"> } = {},
  ): Promise<NatsTaskStore> {
    const store = await KvStore.open(nc, cluster, "gatewayTasks", STORED_TASK_FORMAT, {
      replicas: opts.replicas,
      ttlMs: opts.maxAgeMs ?? 7 * 86_400_000,
      bus: opts.bus,
    });
    return new NatsTaskStore(store);
  }

  async save(task: Task, context: ServerCallContext): Promise<void> {
    await this.put(task, context);
  }

  /** Saves a task as it is; resolves with the entry's revision (what `saveProgress` may expect). */
  put(task: Task, context: ServerCallContext): Promise<number> {
    const owner = kovaMeta(task).owner ?? ownerOf(context);
    return this.store.put(taskKey(owner, task.id), stored(owner, task));
  }

  /**
   * Saves a watched task's progress. Two replicas may watch one task (the one that started
   * it and one a client asked): a write never replaces a terminal task, and it is a
   * compare-and-set, so a replica that lags behind cannot undo the end of a task.
   *
   * `known`: the entry's revision as this replica last wrote it. The save is then first a
   * compare-and-set on it alone (one round trip): if it holds, nobody wrote since, and the
   * entry is this replica's own non-terminal save. Otherwise, or without `known`, the entry
   * is read first, and a terminal one is left as it is.
   * Resolves with the entry's revision after the save (undefined when it was left as it was).
   * @throws UnsupportedFormatError when a newer gateway stored the task (it is not overwritten)
   */
  async saveProgress(task: Task, known?: number): Promise<number | undefined> {
    const owner = kovaMeta(task).owner ?? ownerOf(undefined);
    const key = taskKey(owner, task.id);
    if (known !== undefined) {
      const revision = await this.store.update(key, stored(owner, task), known);
      if (revision !== undefined) return revision;
    }
    let left = false;
    try {
      const out = await this.store.change(key, async (cur) => {
        // Not under its owner yet: maybe an older gateway's task, stored under its bare id.
        const current = cur ?? (await this.store.get(task.id));
        left = current !== undefined && isTerminal(Task.fromJSON(current.value.task).status?.state);
        return left ? undefined : stored(owner, task);
      });
      return left ? undefined : out?.revision;
    } catch (err) {
      if (isKovaError(err, BusErrorCode.KV_CONFLICT)) return undefined;
      throw err;
    }
  }

  async load(taskId: string, context: ServerCallContext): Promise<Task | undefined> {
    if (!isValidId(taskId)) return undefined;
    const owner = ownerOf(context);
    // An entry from before owner-first keys, stored under the bare task id.
    const stored = (await this.read(taskKey(owner, taskId))) ?? (await this.read(taskId));
    if (!stored || stored.owner !== owner) return undefined;
    return Task.fromJSON(stored.task);
  }

  private async read(key: string): Promise<StoredTask | undefined> {
    return (await this.store.get(key))?.value;
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
      this.store.entries({ filter: taskKey(owner, "*"), skipUnreadable: true }),
      this.store.entries({ filter: "*", skipUnreadable: true }),
    ]);
    // By task id: a task an older gateway stored and a newer one then saved under its owner
    // is listed once, as saved last. An entry this gateway cannot read (a newer format, a
    // key that is no task id) is not listed.
    const byId = new Map<string, StoredTask>();
    for (const [key, e] of [...own, ...older]) {
      const taskId = key.slice(key.indexOf(".") + 1);
      if (!byId.has(taskId) && isValidId(taskId) && e.value.owner === owner) byId.set(taskId, e.value);
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

function stored(owner: string, task: Task): StoredTask {
  return { v: STORED_TASK_VERSION, owner, updatedAt: Date.now(), task: Task.toJSON(task) };
}
