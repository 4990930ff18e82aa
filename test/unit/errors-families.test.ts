import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { TimeoutError } from "@nats-io/transport-node";
import { ErrorCode, errorFamilyOf, fromWire, KovaError, KovaTimeoutError } from "../../src/core/errors.js";
import { publicError } from "../../src/core/public-error.js";
import { BusErrorCode, isInfrastructureFailure, NatsUnreachableError } from "../../src/bus/index.js";
import { ActorErrorCode, JournalUnavailableError, LeaseLostError, ReplayMismatchError, TurnInterruptedError } from "../../src/actors/errors.js";
import { WalErrorCode, WalFailedError } from "../../src/wal/errors.js";
import { BudgetExceededError, RunLimitExceededError } from "../../src/agents/errors.js";
import { ModelErrorCode } from "../../src/agents/model/errors.js";
import { ToolsErrorCode } from "../../src/tools/errors.js";
import { WorkflowErrorCode } from "../../src/workflow/errors.js";

/**
 * Whose failure an error is (the infrastructure's, the user's, the run's) is filed with the
 * code where its layer defines it, and one predicate (bus's isInfrastructureFailure) reads it
 * for the turn runner, the agent loop and the swarm coordinator. They used to keep a list
 * each and disagreed: the step journal being unavailable was the infrastructure's for the
 * turn runner (the turn resumes) but ended an agent's or a swarm's run `failed`; a timeout
 * propagated from an agent run but ended a swarm run; a replay mismatch or an INTERNAL
 * failure ended a swarm run but propagated from an agent run, which then ended without its
 * end events.
 */
describe("error families", () => {
  it("errors - the cluster's machinery failing or not answering is the infrastructure's: the WAL, NATS, the step journal, a lease, a timeout", () => {
    const infrastructure = [
      new WalFailedError(new Error("EIO")),
      new NatsUnreachableError("nats://127.0.0.1:1"),
      new KovaError(BusErrorCode.CONNECTION_CLOSED, "closed"),
      new KovaError(BusErrorCode.JETSTREAM_UNAVAILABLE, "no JetStream"),
      new JournalUnavailableError("a1", "written", new Error("timeout")),
      new LeaseLostError("a1"),
      new KovaTimeoutError("publish on kova.c.events.s.r", 5000),
      // Another process's error keeps its code, and so its family.
      fromWire({ code: ActorErrorCode.JOURNAL_UNAVAILABLE, message: "x", retryable: true }),
      fromWire({ code: WalErrorCode.WAL_FULL, message: "x" }),
      // nats.js failing while the cluster starts or elects leaders.
      new TimeoutError(),
    ];
    for (const err of infrastructure) expect(isInfrastructureFailure(err), String(err)).toBe(true);
  });

  it("errors - what the run did (a model, a budget, a policy, a tool, a replay mismatch, a defect) and what the caller sent are not", () => {
    const notInfrastructure = [
      new BudgetExceededError("max_tokens_per_run", 10, 5, "raise it"),
      new RunLimitExceededError("max_turns", 3, "raise it"),
      new KovaError(ModelErrorCode.MODEL_CALL_FAILED, "model failed"),
      new KovaError(ToolsErrorCode.TOOL_FAILED, "the tool failed"),
      new ReplayMismatchError("a1", 2, "model:1", "tool:x"),
      new TurnInterruptedError("a1", "interrupt"),
      new KovaError(ErrorCode.INTERNAL, "a defect"),
      new KovaError(ErrorCode.INVALID_ARGUMENT, "bad"),
      fromWire({ code: "SOME_LAYER_NOT_LOADED_HERE", message: "x" }),
      new Error("untyped"),
      "a string",
      undefined,
    ];
    for (const err of notInfrastructure) expect(isInfrastructureFailure(err), String(err)).toBe(false);
  });

  it("errors - the family follows the kind its layer filed the code under: bad input and not found are the user's, no kind is the run's", () => {
    expect(errorFamilyOf(ErrorCode.INVALID_ARGUMENT)).toBe("user");
    expect(errorFamilyOf(WorkflowErrorCode.RUN_NOT_FOUND)).toBe("user");
    expect(errorFamilyOf(ActorErrorCode.NOT_HOSTED)).toBe("user");
    expect(errorFamilyOf(ErrorCode.TIMEOUT)).toBe("infrastructure");
    expect(errorFamilyOf(WalErrorCode.WAL_CORRUPT)).toBe("infrastructure");
    // LOCK_ORDER is the WAL layer's, but a defect, not the WAL failing.
    expect(errorFamilyOf(WalErrorCode.LOCK_ORDER)).toBe("run");
    expect(errorFamilyOf(ModelErrorCode.MODEL_CALL_FAILED)).toBe("run");
    expect(errorFamilyOf(ErrorCode.INTERRUPTED)).toBe("run");
  });

  it("errors - an end user reads what to do about an infrastructure failure, never the operator's text about a server or a stream", () => {
    const journal = new JournalUnavailableError("a1", "written", undefined).toWire();
    expect(journal.message).toMatch(/nats stream info/);
    const shown = publicError(journal, { code: "RUN_FAILED", message: "the run failed" });
    expect(shown).toEqual({ code: ActorErrorCode.JOURNAL_UNAVAILABLE, message: expect.stringMatching(/unavailable for now; try again later/) });
    expect(publicError({ code: ErrorCode.TIMEOUT, message: "ask on kova.c.a2a.x timed out" }, shown).message).toMatch(/did not answer in time/);
    // The run's own failure keeps its (scrubbed) text: it names the model and the fix.
    expect(publicError({ code: ModelErrorCode.MODEL_CALL_FAILED, message: "model main failed: raise timeout_ms" }, shown).message).toBe(
      "model main failed: raise timeout_ms",
    );
  });

  it("errors - no file decides by a list of its own which codes are the infrastructure's", () => {
    const src = join(import.meta.dirname, "../../src");
    const lists: string[] = [];
    const walk = (dir: string): void => {
      for (const name of readdirSync(dir)) {
        const path = join(dir, name);
        if (statSync(path).isDirectory()) walk(path);
        else if (path.endsWith(".ts"))
          readFileSync(path, "utf8")
            .split("\n")
            .forEach((line, i) => {
              // A prefix check on codes, or a predicate of its own named for the infrastructure.
              if (/\.startsWith\(\s*["']WAL_/.test(line) || /function\s+isInfra/.test(line)) lists.push(`${relative(src, path)}:${i + 1}: ${line.trim()}`);
            });
      }
    };
    walk(src);
    expect(lists).toEqual([
      "bus/errors.ts:" +
        lineOf(join(src, "bus/errors.ts"), "export function isInfrastructureFailure") +
        ": export function isInfrastructureFailure(err: unknown): boolean {",
    ]);
  });
});

function lineOf(path: string, text: string): number {
  return (
    readFileSync(path, "utf8")
      .split("\n")
      .findIndex((l) => l.includes(text)) + 1
  );
}
