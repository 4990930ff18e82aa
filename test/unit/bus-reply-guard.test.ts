import { describe, expect, it } from "vitest";
import { coreReplyProblem } from "../../src/bus/reply-subject.js";
import { ReplyGuard } from "../../src/bus/reply-guard.js";
import { captureLogs } from "../fixtures/capture-logs.js";

const prefixes = ["_INBOX", "_INBOX_client"];

describe("bus reply guard", () => {
  it("reply guard - a core request may be answered on a reply inbox or a service import's reply, nothing else", () => {
    for (const ok of ["_INBOX.abc.1", "_INBOX_client.x.y", "_R_.aB3d.Xy9z"]) expect(coreReplyProblem(ok, prefixes), ok).toBeUndefined();
    for (const bad of [
      "$KV.kova_default_agents.c2",
      "$JS.API.STREAM.DELETE.KOVA_DEFAULT_A2A",
      "$SRV.PING",
      "$SYS.REQ.SERVER.PING",
      "kova.default.a2a.c2",
      "_INBOX",
      "_INBOX.",
      "_INBOX_other.x",
      "_R_",
    ]) {
      expect(coreReplyProblem(bad, prefixes), bad).toContain("reply inbox");
    }
  });

  it("reply guard - logs the first refusal, then at most once per interval with the count since", () => {
    const logs = captureLogs();
    let now = 1_000;
    const guard = new ReplyGuard(prefixes, logs.logger, 60_000, () => now);
    expect(guard.allows("_INBOX.a.1", "kova.default.rpc.c1")).toBe(true);
    for (let i = 0; i < 100; i++) expect(guard.allows("$KV.kova_default_agents.c2", "kova.default.rpc.c1")).toBe(false);
    expect(guard.dropped).toBe(100);
    expect(logs.lines).toHaveLength(1);
    expect(JSON.parse(logs.lines[0]!)).toMatchObject({ subject: "kova.default.rpc.c1", reply: "$KV.kova_default_agents.c2", dropped: 1 });
    now += 60_000;
    expect(guard.allows("$KV.kova_default_leases.c2", "kova.default.control.activate")).toBe(false);
    expect(logs.lines).toHaveLength(2);
    expect(JSON.parse(logs.lines[1]!)).toMatchObject({ dropped: 100, droppedTotal: 101 });
  });
});
