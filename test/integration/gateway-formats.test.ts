import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { Task, TaskState } from "@a2a-js/sdk";
import { describe, expect, it } from "vitest";
import { KeyAdmin } from "../../src/gateway/keys.js";
import { NatsTaskStore, taskKey } from "../../src/gateway/task-store.js";
import { fileServer, uniqueCluster } from "../fixtures/bus/helpers.js";
import { goldenJson, withVersion } from "../fixtures/formats.js";
import { bucketName } from "../../src/bus/index.js";

const nats = fileServer();

describe("gateway records a newer gateway stored", () => {
  it("formats - a task stored by a newer gateway is refused by saveProgress (UNSUPPORTED_FORMAT) and left as it was, not overwritten", async () => {
    const cluster = uniqueCluster("gwf");
    await using nc = await connect({ servers: nats.url });
    const store = await NatsTaskStore.open(nc, cluster);
    const kv = await new Kvm(nc).open(bucketName(cluster, "gatewayTasks"));
    const newer = JSON.stringify(withVersion("gateway", "task-v1.json", 2));
    await kv.put(taskKey("ci-bot", "r-42"), newer);
    // The same task in progress, as an older replica's projection would save it.
    const task = Task.fromJSON((goldenJson("gateway", "task-v1.json") as { task: unknown }).task);
    // Not terminal: only the format can stop the write.
    task.status!.state = TaskState.TASK_STATE_WORKING;
    const err = await store.saveProgress(task).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ code: "UNSUPPORTED_FORMAT", data: { record: "gateway task r-42", version: 2, readable: [1] } });
    expect((await kv.get(taskKey("ci-bot", "r-42")))?.string()).toBe(newer);
  });

  it("formats - kova gateway keys ls (KeyAdmin.list) refuses a key a newer Kova stored, naming it, instead of listing it misread", async () => {
    const cluster = uniqueCluster("gwf");
    await using nc = await connect({ servers: nats.url });
    const admin = await KeyAdmin.open(nc, cluster);
    await admin.add("today");
    expect((await admin.list()).map((k) => k.name)).toEqual(["today"]);
    const kv = await new Kvm(nc).open(bucketName(cluster, "gatewayKeys"));
    await kv.put("ci-bot", JSON.stringify(withVersion("gateway", "key-v1.json", 2)));
    await expect(admin.list()).rejects.toMatchObject({ code: "UNSUPPORTED_FORMAT", data: { record: "gateway key ci-bot", version: 2 } });
  });
});
