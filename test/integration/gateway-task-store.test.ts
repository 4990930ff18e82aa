import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Role, Task, TaskState } from "@a2a-js/sdk";
import type { ServerCallContext } from "@a2a-js/sdk/server";
import { describe, expect, it } from "vitest";
import { NatsTaskStore, STORED_TASK_VERSION, taskKey } from "../../src/gateway/task-store.js";
import { newTask } from "../../src/gateway/task-projection.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { bucketName } from "../../src/bus/index.js";

const nats = fileServer();

/** A caller whose principal id is `id` (a2a-handler.ts, KeyUser). */
function callerOf(id: string): ServerCallContext {
  return { user: { isAuthenticated: true, userName: id, principal: { id } } } as unknown as ServerCallContext;
}

function taskOf(owner: string, n: number): Task {
  const id = `${owner}-task-${n}`;
  const t = newTask({
    taskId: id,
    contextId: `ctx-${owner}`,
    message: { messageId: `m-${id}`, role: Role.ROLE_USER, parts: [], contextId: "", taskId: "", extensions: [], referenceTaskIds: [] } as never,
    meta: { agentId: "helper", sessionId: `s-${owner}`, runId: id, owner },
  });
  // Distinct status times: the listing orders by them.
  t.status!.timestamp = new Date(Date.UTC(2026, 11, 1, 0, 0, n)).toISOString();
  return t;
}

describe("gateway task store: one owner's listing", () => {
  it("tasks - ListTasks of one key reads that key's tasks only, not the 300 of another key; tasks stored under the older bare-id layout are still found by their owner only", async () => {
    const cluster = uniqueCluster("tasks");
    await using nc = await connect({ servers: nats.url });
    const store = await NatsTaskStore.open(nc, cluster);
    const [a, b] = [callerOf("key-a"), callerOf("key-b")];
    await Promise.all(Array.from({ length: 300 }, (_, i) => store.save(taskOf("key-b", i), b)));
    for (const i of [1, 2]) await store.save(taskOf("key-a", i), a);
    // A task a gateway of the previous layout stored under its bare id.
    const legacy = taskOf("key-a", 3);
    const kv = await new Kvm(nc).open(bucketName(cluster, "gatewayTasks"));
    await kv.put(legacy.id, JSON.stringify({ v: STORED_TASK_VERSION, owner: "key-a", updatedAt: Date.now(), task: Task.toJSON(legacy) }));
    expect((await kv.get(taskKey("key-a", "key-a-task-1")))?.operation).toBe("PUT");

    // Every entry read goes to the stream's MSG.GET API: count them.
    let reads = 0;
    const spy = nc.subscribe(`$JS.API.STREAM.MSG.GET.KV_${bucketName(cluster, "gatewayTasks")}`, {
      callback: () => {
        reads++;
      },
    });
    await nc.flush();
    const listed = await store.list({ tenant: "", pageSize: 50 } as never, a);
    await nc.flush();
    spy.unsubscribe();
    expect(listed.tasks.map((t) => t.id)).toEqual(["key-a-task-3", "key-a-task-2", "key-a-task-1"]);
    expect(listed.totalSize).toBe(3);
    expect(reads).toBe(3);

    // By id: the owner finds its tasks in either layout; another key finds neither.
    expect((await store.load("key-a-task-1", a))?.id).toBe("key-a-task-1");
    expect((await store.load("key-a-task-3", a))?.id).toBe("key-a-task-3");
    expect(await store.load("key-a-task-1", b)).toBeUndefined();
    expect(await store.load("key-a-task-3", b)).toBeUndefined();
    expect((await store.list({ tenant: "", pageSize: 500 } as never, b)).totalSize).toBe(300);

    // Progress of a task is written under its owner's key too, and an ended task stays ended.
    const progressed = taskOf("key-a", 1);
    progressed.status = { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: new Date().toISOString() };
    await store.saveProgress(progressed);
    const later = taskOf("key-a", 1);
    later.status = { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date().toISOString() };
    await store.saveProgress(later);
    expect((await store.load("key-a-task-1", a))?.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(taskKey("odd owner.name", "t1")).toMatch(/^=[A-Za-z0-9_-]+\.t1$/);

    // An older gateway's task progressed by this one: saved under its owner, listed once, as saved last.
    const legacyWorking = taskOf("key-a", 3);
    legacyWorking.status = { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date().toISOString() };
    await store.saveProgress(legacyWorking);
    const relisted = await store.list({ tenant: "", pageSize: 50 } as never, a);
    expect(relisted.tasks.map((t) => t.id).sort()).toEqual(["key-a-task-1", "key-a-task-2", "key-a-task-3"]);
    expect(relisted.tasks.find((t) => t.id === "key-a-task-3")!.status?.state).toBe(TaskState.TASK_STATE_WORKING);
    // An older gateway's task that ended is not reopened by a lagging replica's progress.
    const ended = taskOf("key-a", 4);
    ended.status = { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: new Date().toISOString() };
    await kv.put(ended.id, JSON.stringify({ v: STORED_TASK_VERSION, owner: "key-a", updatedAt: Date.now(), task: Task.toJSON(ended) }));
    await store.saveProgress(taskOf("key-a", 4));
    expect((await store.load("key-a-task-4", a))?.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
  });

  it("tasks - a save on the revision this replica wrote is one compare-and-set, no read; on a revision another replica moved past, it reads first and leaves an ended task ended", async () => {
    const cluster = uniqueCluster("tasks");
    await using nc = await connect({ servers: nats.url });
    const store = await NatsTaskStore.open(nc, cluster);
    const other = await NatsTaskStore.open(nc, cluster);
    const a = callerOf("key-a");
    // A KV get is a direct get (the bucket allows them) or the stream's MSG.GET: count both.
    let reads = 0;
    const bucket = `KV_${bucketName(cluster, "gatewayTasks")}`;
    const spies = [`$JS.API.DIRECT.GET.${bucket}`, `$JS.API.DIRECT.GET.${bucket}.>`, `$JS.API.STREAM.MSG.GET.${bucket}`].map((subject) =>
      nc.subscribe(subject, { callback: () => void reads++ }),
    );
    await nc.flush();
    const state = (s: TaskState) => {
      const t = taskOf("key-a", 1);
      t.status = { state: s, message: undefined, timestamp: new Date().toISOString() };
      return t;
    };
    const created = await store.put(taskOf("key-a", 1), a);
    const working = await store.saveProgress(state(TaskState.TASK_STATE_WORKING), created);
    expect(working).toBeGreaterThan(created);
    await nc.flush();
    expect(reads).toBe(0);
    // another replica ends the task; this one, lagging behind, saves on the revision it wrote
    await other.saveProgress(state(TaskState.TASK_STATE_COMPLETED));
    reads = 0;
    expect(await store.saveProgress(state(TaskState.TASK_STATE_WORKING), working)).toBeUndefined();
    await nc.flush();
    for (const spy of spies) spy.unsubscribe();
    expect(reads).toBeGreaterThan(0);
    expect((await store.load("key-a-task-1", a))?.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
  });
});
