import { describe, expect, it } from "vitest";
import { natsAgentDirectory } from "../../src/swarm/index.js";
import { startNatsServer } from "../../src/testing/index.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { connectBus, uniqueCluster } from "../fixtures/bus/helpers.js";
import { declareAgents } from "../fixtures/swarm/helpers.js";

describe("swarm directory", () => {
  it("directory - a registry record of a format this build does not read gets its agent no subtasks, and a warning names it; the others are listed", async () => {
    await using server = await startNatsServer({ allowExternal: false });
    await using bus = await connectBus(server.url, uniqueCluster("dir"));
    await declareAgents(bus, [
      { id: "a-now", type: "t", capabilities: ["research"] },
      { id: "a-future", type: "t", capabilities: ["research"], v: 2 },
    ]);
    // Both answer the fast path as live, hosted agents do: only the record's format tells them apart.
    for (const id of ["a-now", "a-future"]) bus.serveRpc(id, async () => ({ capabilities: ["research"], state: "Idle" }));
    const logs = captureLogs();
    const listed = await natsAgentDirectory(bus, { logger: logs.logger }).list();
    expect(listed.map((c) => c.agentId)).toEqual(["a-now"]);
    const warned = logs.lines.map((l) => JSON.parse(l) as { level: number; msg: string; agentId?: string }).filter((l) => l.agentId === "a-future");
    expect(warned.map((l) => [l.level, l.msg])).toEqual([[40, "registry record not readable by this build; the agent gets no subtasks"]]);
  });
});
