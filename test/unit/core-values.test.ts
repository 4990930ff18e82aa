import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/node/config.js";
import { parseRunRequest, readTaskPayload } from "../../src/agents/run-protocol.js";
import { parseWorkflowText } from "../../src/workflow/definition.js";
import { AS_ARGUMENT, durationMs, parseDuration } from "../../src/core/duration.js";
import { derivedId } from "../../src/core/ids.js";
import { isLoopbackHost } from "../../src/core/loopback.js";
import { parseTomlText } from "../../src/core/toml.js";
import { ArgumentError, ConfigError } from "../../src/core/errors.js";

describe("core values: one reader each for durations, derived ids, loopback and TOML", () => {
  it("duration - every unit, decimals, any case and a space between number and unit", () => {
    const cases: Array<[string, number]> = [
      ["500ms", 500],
      ["30s", 30_000],
      ["30sec", 30_000],
      ["2secs", 2_000],
      ["15m", 900_000],
      ["5min", 300_000],
      ["2mins", 120_000],
      ["2h", 7_200_000],
      ["1hr", 3_600_000],
      ["3hrs", 10_800_000],
      ["1d", 86_400_000],
      ["1.5s", 1_500],
      ["0.5h", 1_800_000],
      ["5MIN", 300_000],
      [" 10 s ", 10_000],
    ];
    for (const [text, ms] of cases) expect(parseDuration(text), text).toBe(ms);
    for (const text of ["soon", "5 fortnights", "-5s", "1e3s", "", "30000"]) expect(parseDuration(text), text).toBeUndefined();
    expect(parseDuration("30000", { unitOptional: true })).toBe(30_000);
  });

  it("duration - a number is milliseconds; zero, negatives and what rounds to zero are refused", () => {
    expect(durationMs(2500, "k")).toBe(2500);
    expect(durationMs(1.6, "k")).toBe(2);
    for (const bad of [0, -1, 0.4, Number.NaN, Number.POSITIVE_INFINITY, "0s", true, null, {}])
      expect(() => durationMs(bad, "k"), String(bad)).toThrow(/k: must be a duration/);
  });

  it("duration - config keys fail with ConfigError, the wire and the CLI with ArgumentError, both naming the key", () => {
    expect(() => durationMs("later", "swarms[0].deadline")).toThrow(ConfigError);
    expect(() => durationMs("later", "payload.constraints.deadline", AS_ARGUMENT)).toThrow(ArgumentError);
    expect(() => durationMs("later", "payload.constraints.deadline", AS_ARGUMENT)).toThrow(/^payload\.constraints\.deadline: must be a duration/);
  });

  it("duration - kova.toml, a task's constraints and an agent's deadline read the same text as the same time", () => {
    const now = 1_700_000_000_000;
    for (const [text, ms] of [
      ["90sec", 90_000],
      ["1.5h", 5_400_000],
      ["2mins", 120_000],
    ] as const) {
      const cfg = parseConfig(`[[actor_templates]]\nname = "t"\ntype = "counter"\nidle_after = "${text}"\n`);
      expect(cfg.templates[0]!.idleAfterMs, text).toBe(ms);
      expect(readTaskPayload({ input: "x", constraints: { deadline: text } }).constraints!.deadline).toBe(text);
      expect(parseRunRequest("task_delegate", { input: "x", constraints: { deadline: text } }, now)).toMatchObject({ deadline: now + ms });
    }
  });

  it("derived id - both stored shapes keep producing the same strings", () => {
    // Written by earlier builds into turn records, streams (Nats-Msg-Id) and event histories:
    // a change here would make a replay after an upgrade send under new ids.
    expect(derivedId("uuid", "agent-7", "m-0002", "send:1")).toBe("9e2f443d-f0ac-8248-464b-ea9d47bb4203");
    expect(derivedId("uuid", "p1", "q-1", "reply")).toBe("092f31d9-c30f-8fac-8fd0-ee08dd5eae24");
    expect(derivedId({ prefix: "run" }, "swarm-1", "3")).toBe("run-0YszCiHDW4klaue-dcsMp2");
    expect(derivedId({ prefix: "link" }, "call-abc")).toBe("link-MT0MGGpxFbBiiSyb2IYHxW");
    expect(derivedId({ prefix: "ev" }, "swarm-x", "swarm_planned", "")).toBe("ev-e2i4PaVo450rqXDk_RL2bD");
  });

  it("derived id - parts are separated, so moving a character between parts gives another id; a bad prefix is refused", () => {
    expect(derivedId("uuid", "ab", "c")).not.toBe(derivedId("uuid", "a", "bc"));
    expect(derivedId({ prefix: "run" }, "ab", "c")).not.toBe(derivedId({ prefix: "run" }, "a", "bc"));
    expect(() => derivedId({ prefix: "a.b" }, "x")).toThrow(/prefix/);
    expect(() => derivedId({ prefix: "p".repeat(65) }, "x")).toThrow(/at most 64/);
  });

  it("loopback - localhost, 127.0.0.0/8 and ::1 (bracketed or not); nothing else", () => {
    for (const host of ["localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"]) expect(isLoopbackHost(host), host).toBe(true);
    for (const host of ["10.0.0.5", "0.0.0.0", "localhost.example.com", "128.0.0.1", "::", "127.0.0.1234"]) expect(isLoopbackHost(host), host).toBe(false);
  });

  it("toml - a syntax error names the file, the line and the column, in kova.toml and in a workflow file", () => {
    expect(parseTomlText('[a]\nb = "c"\n', "k.toml")).toEqual({ a: { b: "c" } });
    expect(() => parseTomlText("[a\nb = 1\n", "k.toml")).toThrow(/^k\.toml: invalid TOML at line 1, column \d+: .*; fix the syntax there$/);
    expect(() => parseConfig("[node\n", { path: "/etc/kova.toml" })).toThrow(/^\/etc\/kova\.toml: invalid TOML at line 1/);
    expect(() => parseWorkflowText("[workflow\nid=1", "bad.toml")).toThrow(/bad\.toml.*cannot parse: invalid TOML at line 1/);
  });
});
