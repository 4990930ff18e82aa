import { readFileSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { describe, expect, it } from "vitest";
import { sourceFiles } from "../../scripts/source-imports.mjs";

/**
 * Turn code is rebuilt from its record after a crash, a takeover or by `kova wal replay`
 * (docs/actors.md, "Determinism"): between steps it must take the clock, random numbers and
 * ids from the context (`ctx.now()`, `ctx.random()`, `ctx.newId()`), which records them, and
 * start no timer of its own. Inside a step's function anything goes: the step's result is
 * recorded, and a replay reads it instead of calling the function. So this check finds every
 * wall-clock reading, random draw and timer in turn code, and each must be listed below
 * with the step (or the reason) that makes it safe.
 *
 * Turn code: a file outside the actor runtime that names ActorContext or calls `.step(`, the
 * built-in actor types, the agent actor's definition and the workflow engine (which a run's
 * turn drives between steps). The runtime (src/actors, but for its built-in types) supplies
 * the context and the journal; src/testing is not production code.
 */
const FORBIDDEN = [
  /\bDate\.now\(/,
  /\bnew Date\(\s*\)/,
  /\bMath\.random\(/,
  /\bperformance\.now\(/,
  /\bprocess\.hrtime\b/,
  /\b(?:setTimeout|setInterval|setImmediate)\(/,
  /\b(?:randomUUID|randomBytes|randomInt|getRandomValues)\(/,
  /\b(?:sleep|markTime)\(/,
];
const RUNTIME = "actors/";
const BUILT_IN_TYPES = ["actors/counter.ts"];
const ALSO = ["agents/agent-actor.ts", "workflow/engine.ts"];

/**
 * Each allowed line, keyed by file and a piece of the line (not a line number): each must
 * match exactly one line, so an exemption cannot outlive its line or cover a second one.
 */
const EXEMPT: ReadonlyArray<{ file: string; line: string; why: string }> = [
  {
    file: "agents/budget-time.ts",
    line: "`the run was stopped after ${Date.now() - run.startedAt} ms",
    why: "the run's time limit: the timer's own message, built when it fires (see the next two)",
  },
  {
    file: "agents/budget-time.ts",
    line: "const delay = limitAt - Date.now();",
    why:
      "the run's time limit is wall-clock time on purpose, armed from the journaled start (ctx.now()); when it fires it aborts the turn's signal, " +
      "which cuts the step in flight unrecorded, as a crash does, so a replay takes the same path as a recovery",
  },
  {
    file: "agents/budget-time.ts",
    line: "timer = setTimeout(delay > MAX_TIMER_MS ? arm : fire, Math.min(delay, MAX_TIMER_MS));",
    why: "the run's time limit (above)",
  },
  {
    file: "agents/tool-calls.ts",
    line: "const started = performance.now();",
    why: "inside the `tool:<callId>` step: the call's duration is part of its recorded result",
  },
  { file: "agents/tool-calls.ts", line: "ms: Math.round(performance.now() - started),", why: "inside the `tool:<callId>` step (above)" },
  {
    file: "agents/model-turn.ts",
    line: "const waitMs = bucket.waitMs(Date.now());",
    why: "inside the `model:<turn>` step (callModel → chooseAndCall): the token bucket's wait happens before the recorded model call",
  },
  { file: "agents/model-turn.ts", line: "await sleep(waitMs, s.ctx.signal);", why: "inside the `model:<turn>` step (above)" },
  {
    file: "agents/model-turn.ts",
    line: "if (tpm !== undefined) s.runtime.bucket(s.agentId, tpm).charge(tokens, Date.now());",
    why: "inside the `model:<turn>` step: charges the node's token bucket, which is no part of the turn's state",
  },
  {
    file: "agents/run-scope.ts",
    line: "ts: Date.now(), data };",
    why: "runEvent is published only inside the step that produces the event (see publish there): the event's timestamp is the publish's",
  },
  {
    file: "agents/model-turn.ts",
    line: "this.#scheduled ??= setImmediate(() => this.flush());",
    why: "DeltaBatch groups a model call's streamed deltas inside the `model:<turn>` step; `stream` events are not journaled",
  },
  {
    file: "eval/external.ts",
    line: "await new Promise((res) => setTimeout(res, Math.min(2000, 100 * 2 ** Math.min(polls, 4))));",
    why: "callA2a runs inside the `call` step: the polled answer is its recorded result",
  },
  {
    file: "eval/experiment-actor.ts",
    line: "await sleep(OUTBOX_RETRY_MS[attempt]!);",
    why: "inside the unrecorded `effects` step: the wait between tries of effects left to land after the checkpoint, which change no state",
  },
  {
    file: "agents/approval-gate.ts",
    line: "const now = Date.now();",
    why: "inside the `approval:request` step: the approval's expiry is part of its recorded result",
  },
  {
    file: "swarm/coordinator.ts",
    line: "await Promise.race([watcher.caughtUp, new Promise((r) => setTimeout(r, CATCH_UP_MS).unref())]);",
    why: "inside the `collect` step: the outcomes it collects are its recorded result",
  },
  {
    file: "swarm/coordinator.ts",
    line: "const remaining = Math.max(1, Math.round(cutoff - Date.now()));",
    why: "delegate() runs inside the `delegate` step: the deadline handed to the children is what is left of the swarm's when they are sent",
  },
  {
    file: "swarm/coordinator.ts",
    line: "const event: KovaEvent = { type, sessionId: this.sessionId, runId: this.runId, ts: Date.now(), data };",
    why: "publish() runs inside emit()'s `emit:<type>` step; the event's id is derived from the run, so a re-run stores it once",
  },
];

const src = join(import.meta.dirname, "../../src");

function turnFiles(): Array<{ file: string; text: string }> {
  const out: Array<{ file: string; text: string }> = [];
  for (const path of sourceFiles(src)) {
    const file = relative(src, path).split(sep).join("/");
    if (file.startsWith("testing/")) continue;
    if (file.startsWith(RUNTIME) && !BUILT_IN_TYPES.includes(file)) continue;
    const text = readFileSync(path, "utf8");
    if (BUILT_IN_TYPES.includes(file) || ALSO.includes(file) || /\bActorContext\b|\.step\(/.test(text)) out.push({ file, text });
  }
  return out;
}

/** Forbidden calls outside comments: `{ file, line }` per line that has one. */
function findings(files: Array<{ file: string; text: string }>): Array<{ file: string; line: string; at: number }> {
  const out: Array<{ file: string; line: string; at: number }> = [];
  for (const { file, text } of files) {
    text.split("\n").forEach((raw, i) => {
      const code = raw.replace(/\/\/.*$/, "").trim();
      if (code.startsWith("*") || code.startsWith("/*")) return;
      if (FORBIDDEN.some((re) => re.test(code))) out.push({ file, line: raw.trim(), at: i + 1 });
    });
  }
  return out;
}

describe("determinism of turn code", () => {
  it("determinism - turn code reads no clock, draws no random number and starts no timer outside a step, but for the lines listed with why", () => {
    const files = turnFiles();
    expect(files.map((f) => f.file)).toEqual(
      expect.arrayContaining([
        "actors/counter.ts",
        "agents/agent-actor.ts",
        "agents/loop.ts",
        "swarm/coordinator.ts",
        "workflow/engine.ts",
        "workflow/run-actor.ts",
      ]),
    );
    const found = findings(files);
    const unlisted = found.filter((f) => !EXEMPT.some((x) => x.file === f.file && f.line.includes(x.line)));
    expect(
      unlisted.map((f) => `${f.file}:${f.at}: ${f.line}`),
      "use ctx.now(), ctx.random(), ctx.newId() between steps, or move the call into the step whose result it feeds (then list it here, with why)",
    ).toEqual([]);
    for (const x of EXEMPT)
      expect(
        found.filter((f) => f.file === x.file && f.line.includes(x.line)),
        `${x.file}: ${x.line}`,
      ).toHaveLength(1);
  });

  it("determinism - the scan finds each forbidden form, in code and not in comments", () => {
    const lines = [
      "const t = Date.now();",
      "const d = new Date();",
      "const r = Math.random();",
      "const p = performance.now();",
      "const h = process.hrtime.bigint();",
      "setTimeout(done, 10);",
      "const id = randomUUID();",
      "await sleep(5);",
      "// Date.now() in a comment",
      " * Math.random() in a doc comment",
      "const when = new Date(ts).toISOString();",
      "const at = ctx.now();",
    ];
    expect(findings([{ file: "x.ts", text: lines.join("\n") }]).map((f) => f.at)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });
});
