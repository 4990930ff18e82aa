import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { pino } from "pino";
import { formatLogLine, lineStream } from "../../src/core/log-lines.js";

describe("terminal log lines", () => {
  it("logs - a pino JSON line becomes time, level, component, message and key=value fields", () => {
    const line = formatLogLine(
      JSON.stringify({
        level: 40,
        time: Date.UTC(2026, 10, 30, 12, 3, 4, 512),
        pid: 7,
        component: "membership",
        msg: "peer silent",
        node: "n2",
        ageMs: 5200,
        note: "two words",
      }),
    );
    expect(line).toBe('12:03:04.512 WARN  [membership] peer silent node=n2 ageMs=5200 note="two words"');
    expect(
      formatLogLine(JSON.stringify({ level: 30, time: Date.UTC(2026, 10, 30, 12, 3, 4, 512), component: "coordinator", part: "run-watcher", msg: "m" })),
    ).toBe("12:03:04.512 INFO  [coordinator/run-watcher] m");
    expect(formatLogLine("not json at all")).toBe("not json at all");
  });

  it("logs - errors keep their code, message and where they were thrown; lines split across writes come out whole", async () => {
    const out = new PassThrough();
    const chunks: string[] = [];
    out.on("data", (c: Buffer) => chunks.push(c.toString()));
    const log = pino({ level: "info" }, lineStream(out, false));
    const err = Object.assign(new Error("refused"), { code: "NATS_AUTH_FAILED" });
    log.error({ err }, "connect failed");
    log.info("second");
    await new Promise((r) => setImmediate(r));
    const text = chunks.join("");
    expect(text).toMatch(/ERROR connect failed err="\[NATS_AUTH_FAILED\] refused \(at .+\)"\n/);
    expect(text).toMatch(/INFO {2}second\n$/);
  });
});
