import { describe, expect, it } from "vitest";
import { APPROVAL_FORMAT } from "../../src/agents/approvals.js";
import { GROUP_TOTAL_VERSION, readGroupTotal } from "../../src/agents/budget-groups.js";
import { MEMORY_VERSION, readStoredMemory } from "../../src/agents/memory/store.js";
import { SETTINGS_FORMAT, SETTINGS_VERSION } from "../../src/agents/settings.js";
import { expectRefused, goldenJson, withVersion } from "../fixtures/formats.js";

// What each store writes today is the -tagged (or only) file's shape; values written before versioning have no `v`.
describe("agents formats (golden files)", () => {
  it("formats - a version 1 conversation still loads as the session's messages, tool calls and results included", () => {
    expect(MEMORY_VERSION).toBe(1);
    const messages = readStoredMemory("researcher", "s-7", goldenJson("agents", "memory-v1.json"));
    expect(messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
    expect(messages[1]).toEqual({ role: "assistant", content: null, toolCalls: [{ id: "call_1", name: "web_search", arguments: '{"q":"tide Brest"}' }] });
    expect(messages[2]).toEqual({ role: "tool", toolCallId: "call_1", content: "High tide 06:12, 18:40" });
  });

  it("formats - version 1 settings load, as written today (v: 1) and before versioning (no v)", () => {
    expect(SETTINGS_VERSION).toBe(1);
    for (const name of ["settings-v1.json", "settings-v1-tagged.json"])
      expect(SETTINGS_FORMAT.decode("researcher", goldenJson("agents", name)), name).toEqual({ model: "fast" });
  });

  it("formats - a version 1 budget group total loads, as written today (v: 1) and before versioning (no v)", () => {
    expect(GROUP_TOTAL_VERSION).toBe(1);
    for (const name of ["budget-group-v1.json", "budget-group-v1-tagged.json"]) {
      expect(readGroupTotal("kova_default_agent_budgets", "group.research", goldenJson("agents", name)), name).toBe(1234);
    }
    // A damaged total is still corrupt, not a format question.
    expect(() => readGroupTotal("kova_default_agent_budgets", "group.research", { v: 1, used: -5 })).toThrow(
      expect.objectContaining({ code: "BUDGET_LEDGER_CORRUPT" }),
    );
  });

  it("formats - a version 1 approval still loads with its decision", () => {
    expect(APPROVAL_FORMAT.decode("r-42.ap-1", goldenJson("agents", "approval-v1.json"))).toMatchObject({
      v: 1,
      runId: "r-42",
      approvalId: "ap-1",
      callId: "call_1",
      tool: "shell_exec",
      args: { command: "systemctl restart web" },
      status: "approved",
      by: "alice",
    });
  });

  it("formats - a conversation, settings, budget total or approval of an unknown version is refused naming it and the versions this build reads", () => {
    expectRefused(() => readStoredMemory("researcher", "s-7", withVersion("agents", "memory-v1.json", 2)), "memory of researcher session s-7", [1]);
    expectRefused(() => SETTINGS_FORMAT.decode("researcher", withVersion("agents", "settings-v1-tagged.json", 2)), "settings of agent researcher", [1]);
    expectRefused(
      () => readGroupTotal("kova_default_agent_budgets", "group.research", withVersion("agents", "budget-group-v1-tagged.json", 2)),
      "budget group group.research in kova_default_agent_budgets",
      [1],
    );
    expectRefused(() => APPROVAL_FORMAT.decode("r-42.ap-1", withVersion("agents", "approval-v1.json", 2)), "approval ap-1 of run r-42", [1]);
  });
});
