import { Task, TaskState } from "@a2a-js/sdk";
import { describe, expect, it } from "vitest";
import { hashKey, STORED_KEY_FORMAT, STORED_KEY_VERSION } from "../../src/gateway/keys.js";
import { STORED_TASK_FORMAT, STORED_TASK_VERSION } from "../../src/gateway/task-store.js";
import { expectRefused, goldenJson, withVersion } from "../fixtures/formats.js";

describe("gateway formats (golden files)", () => {
  it("formats - a version 1 API key loads: its hash still recognises the key, its limits still apply", () => {
    expect(STORED_KEY_VERSION).toBe(1);
    const key = STORED_KEY_FORMAT.decode("ci-bot", goldenJson("gateway", "key-v1.json"));
    // The golden file stores the hash of this (public, test-only) key.
    expect(key.hash).toBe(hashKey("kova_golden-fixture-key-not-a-secret"));
    expect(key).toMatchObject({ name: "ci-bot", agents: ["researcher", "writer"], ratePerMinute: 60 });
  });

  it("formats - a version 1 task loads as the A2A task it was, with its owner", () => {
    expect(STORED_TASK_VERSION).toBe(1);
    const stored = STORED_TASK_FORMAT.decode("r-42", goldenJson("gateway", "task-v1.json"));
    expect(stored.owner).toBe("ci-bot");
    const task = Task.fromJSON(stored.task);
    expect(task).toMatchObject({ id: "r-42", contextId: "s-7", status: { state: TaskState.TASK_STATE_COMPLETED } });
    expect(task.artifacts[0]?.parts[0]?.content).toEqual({ $case: "text", value: "High tide is at 06:12 and 18:40." });
    expect(task.history[0]?.messageId).toBe("m-1");
  });

  it("formats - a key or task of an unknown version is refused naming it and the versions this build reads", () => {
    expectRefused(() => STORED_KEY_FORMAT.decode("ci-bot", withVersion("gateway", "key-v1.json", 2)), "gateway key ci-bot", [1]);
    expectRefused(() => STORED_TASK_FORMAT.decode("r-42", withVersion("gateway", "task-v1.json", 2)), "gateway task r-42", [1]);
  });
});
