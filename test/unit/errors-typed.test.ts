import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { JetStreamApiError } from "@nats-io/jetstream";
import { RequestError, NoRespondersError, TimeoutError } from "@nats-io/transport-node";
import { defineErrorCodes, fromWire, isKnownErrorCode, KovaError } from "../../src/core/errors.js";
import { isNatsNoResponders, isNatsTimeout, isWrongLastSequence, jsApiCode } from "../../src/bus/nats-errors.js";
import { ActorErrorCode } from "../../src/actors/errors.js";

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (path.endsWith(".ts")) yield path;
  }
}

// An error is recognised by its class or code, never by what its message says: texts
// change between nats-server and nats.js versions, codes are their contract.
const MESSAGE_MATCHING = [
  /\/[^/\n]+\/[a-z]*\.test\(\s*(String\(\s*)?\(?(err|e|error|cause|msg|message|description)\b/,
  /\b(err|e|error|cause)\)?\??\.message\??\.(match|includes|startsWith|endsWith|search)\(/,
  /\bString\((err|e|error)\)\.(match|includes|startsWith|search)\(/,
];

describe("typed errors", () => {
  it("errors - no file in src/ recognises an error by matching its message text", () => {
    const src = join(import.meta.dirname, "../../src");
    const offenders: string[] = [];
    let scanned = 0;
    for (const file of files(src)) {
      scanned++;
      readFileSync(file, "utf8")
        .split("\n")
        .forEach((line, i) => {
          if (MESSAGE_MATCHING.some((re) => re.test(line))) offenders.push(`${relative(src, file)}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(scanned).toBeGreaterThan(50);
    expect(offenders).toEqual([]);
  });

  it("errors - the scan itself catches the patterns it is meant to forbid", () => {
    const bad = [
      `if (/no responders|503/i.test(message)) {`,
      `if (!/not found/i.test(String(err))) throw err;`,
      `return /wrong last sequence/i.test(String((err as Error)?.message ?? err));`,
      `if (err.message.includes("timeout")) return;`,
    ];
    for (const line of bad)
      expect(
        MESSAGE_MATCHING.some((re) => re.test(line)),
        line,
      ).toBe(true);
    expect(MESSAGE_MATCHING.some((re) => re.test(`if (isConsumerNotFound(err)) return;`))).toBe(false);
  });

  it("errors - nats.js failures are recognised by class and API code", () => {
    const apiError = (code: number) => new JetStreamApiError({ code: 400, err_code: code, description: "anything at all" });
    expect(isWrongLastSequence(apiError(10071))).toBe(true);
    expect(isWrongLastSequence(apiError(10164))).toBe(true);
    expect(isWrongLastSequence(apiError(10058))).toBe(false);
    expect(isWrongLastSequence(new Error("wrong last sequence: 3"))).toBe(false);
    expect(jsApiCode(apiError(10014))).toBe(10014);
    expect(isNatsNoResponders(new RequestError("x", { cause: new NoRespondersError("a.b") }))).toBe(true);
    expect(isNatsNoResponders(new Error("no responders"))).toBe(false);
    expect(isNatsTimeout(new TimeoutError())).toBe(true);
    expect(isNatsTimeout(new Error("timeout"))).toBe(false);
  });

  it("errors - layers register their own codes; a registered code survives the wire, a duplicate is refused", () => {
    const codes = defineErrorCodes("test-layer", { TEST_ONLY_CODE: "TEST_ONLY_CODE" });
    expect(isKnownErrorCode(codes.TEST_ONLY_CODE)).toBe(true);
    const back = fromWire(new KovaError(codes.TEST_ONLY_CODE, "boom", { retryable: true }).toWire());
    expect(back?.code).toBe("TEST_ONLY_CODE");
    expect(back?.retryable).toBe(true);
    // A code from a layer this process did not load keeps its code; a malformed one does not.
    expect(fromWire({ code: "DEFINED_ELSEWHERE", message: "x" })?.code).toBe("DEFINED_ELSEWHERE");
    expect(fromWire({ code: "not a code", message: "x" })?.code).toBe("REMOTE_ERROR");
    expect(fromWire({ code: ActorErrorCode.LEASE_LOST, message: "x" })?.code).toBe("LEASE_LOST");
    expect(() => defineErrorCodes("another-layer", { TEST_ONLY_CODE: "TEST_ONLY_CODE" })).toThrow(/already defined by test-layer/);
    expect(() => defineErrorCodes("x", { lower: "lower" })).toThrow(/SCREAMING_SNAKE/);
  });
});
