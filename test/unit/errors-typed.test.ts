import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { JetStreamApiError } from "@nats-io/jetstream";
import { RequestError, NoRespondersError, TimeoutError } from "@nats-io/transport-node";
import { classifyErrorCodes, defineErrorCodes, errorKindOf, fromWire, isKnownErrorCode, KovaError } from "../../src/core/errors.js";
import { isNatsNoResponders, isNatsTimeout, isWrongLastSequence, jsApiCode } from "../../src/bus/nats-errors.js";
import { ActorErrorCode } from "../../src/actors/errors.js";
import { BusErrorCode } from "../../src/bus/errors.js";

function* files(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path);
    else if (path.endsWith(".ts")) yield path;
  }
}

// An error is recognised by its class or code, never by what its message says: texts
// change between nats-server and nats.js versions, codes are their contract. The scan is
// per line and looks for the shapes such a check takes on the text of an error or of a
// process's output (a child's stderr or stdout, a log tail: the same habit, one step
// removed): a regular expression tested on it (or its String(), its template string, its
// message), a string method or an equality on a message (or a JetStream API error's
// description), a string method on an error's String() or toString() or on a child's
// stderr or stdout. `typeof x.message === "string"` is a shape check, not one.
const ERR = "(?:err|e|error|cause|ex|exc|failure|rejection)";
const OUTPUT = "(?:stderr|stdout|log|logs|tail|output)";
const TEXT = String.raw`(?:message|api_error\??\.description)`;
const STRING_METHOD = "(?:match|matchAll|includes|startsWith|endsWith|search|indexOf|lastIndexOf|localeCompare)";
const MESSAGE_MATCHING = [
  new RegExp(
    String.raw`\/[^/\n]+\/[dgimsuvy]*\.(?:test|exec)\(\s*(?:String\(|\x60\$\{|JSON\.stringify\()?\s*\(?\s*(?:${ERR}|${OUTPUT}|msg|message|description)\b`,
  ),
  /\/[^/\n]+\/[dgimsuvy]*\.(?:test|exec)\([^)]*\.(?:message|description|stderr|stdout)\b/,
  new RegExp(String.raw`\.${TEXT}\)?\??\.${STRING_METHOD}\(`),
  new RegExp(String.raw`(?<!typeof\s+[\w$.?()]*)\.${TEXT}\)?\s*[!=]==?\s*["'\x60]`),
  new RegExp(String.raw`["'\x60]\s*[!=]==?\s*\(?[\w$.?]*\.${TEXT}\b`),
  new RegExp(String.raw`\b(?:String|JSON\.stringify)\(\s*\(?\s*${ERR}\b[^;]*?\)\)?\??\.${STRING_METHOD}\(`),
  new RegExp(String.raw`\x60\$\{\s*\(?\s*${ERR}\b[^}]*\}\x60\.${STRING_METHOD}\(`),
  new RegExp(String.raw`\b${ERR}\)?\??\.toString\(\)\.${STRING_METHOD}\(`),
  new RegExp(String.raw`\b(?:stderr|stdout)\)?\??\.${STRING_METHOD}\(`),
];

/**
 * Lines the scan matches that are not an error check, each with why. Keyed by file and a
 * piece of the line (not a line number), and each must match exactly one line: an
 * exemption cannot outlive its line or cover a second one.
 */
const EXEMPT: ReadonlyArray<{ file: string; line: string; why: string }> = [
  {
    file: "node/nats/launcher.ts",
    line: "/listen tcp \\S*?:(\\d+): bind: address already in use/.exec(log)",
    why:
      "nats-server has exited during start; its log tail is all it left, and this reads the port it could not bind out of " +
      "that output to raise NatsPortInUseError. No error object or code exists to recognise: this parses a process's output",
  },
];

/**
 * An error thrown (or a promise rejected) on a runtime path carries a code: `throw new
 * Error(...)` is an INTERNAL on the wire and says nothing a caller can act on. `src/testing`
 * is the test harness, not a runtime path. Exempt lines are keyed like EXEMPT above.
 */
// What is thrown (or rejected) is the Error itself, not a typed error whose cause it is.
const UNTYPED_THROW = [/\bthrow\s+(?:Object\.assign\(\s*)?new Error\(/, /\bthrow\b[^;]*(?:\?\?|\|\|)\s*new Error\(/, /\breject\(\s*new Error\(/];
const UNTYPED_EXEMPT: ReadonlyArray<{ file: string; line: string; why: string }> = [
  ...["must be SCREAMING_SNAKE", "is already defined by ${owner}", "define the code first", "is already of kind"].map((line) => ({
    file: "core/errors.ts",
    line,
    why: "the code registry itself: it runs while core's own codes register, before KovaError exists in the module, and fails only on a programming error at import time",
  })),
  {
    file: "tools/builtin/file.ts",
    line: 'new Error("not a directory"), { code: "ENOTDIR" }',
    why: "an errno-shaped error caught two lines below, with realpathSync's own, which reads its `code` into the ConfigError it throws",
  },
  {
    file: "tools/builtin/ssrf-guard.ts",
    line: 'resolved to no address`), { code: "ENOTFOUND" }',
    why: "an empty DNS answer takes the shape of the resolver's own errno errors (ENOTFOUND), which the http tool's caller maps to its typed error in one place",
  },
  {
    file: "tools/builtin/file-root.ts",
    line: "unreachable: a walk ends at its last name",
    why: "never runs: the loop returns at its last name; the statement is there for the type checker",
  },
];

/**
 * JetStream API failures are recognised by the predicates of src/bus/nats-errors.ts
 * (`isStreamNotFound(err)`, …), which keep the codes in one place; an inline check of a code
 * or class elsewhere is a second copy that drifts.
 */
const INLINE_API_CHECK = [/\bJetStreamApiCodes\./, /\binstanceof\s+JetStreamApiError\b/, /\.isNoResponders\(\)/, /\bjsApiCode\(/];
const API_CHECKS_LIVE_IN = "bus/nats-errors.ts";

function scan(patterns: readonly RegExp[]): { lines: Array<{ file: string; line: string }>; scanned: number } {
  const src = join(import.meta.dirname, "../../src");
  const lines: Array<{ file: string; line: string }> = [];
  let scanned = 0;
  for (const path of files(src)) {
    scanned++;
    const file = relative(src, path);
    readFileSync(path, "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (patterns.some((re) => re.test(line))) lines.push({ file, line: `${i + 1}: ${line.trim()}` });
      });
  }
  return { lines, scanned };
}

describe("typed errors", () => {
  it("errors - no file in src/ recognises an error by matching its message text (or a process's output), but for the exemptions listed with why", () => {
    const { lines, scanned } = scan(MESSAGE_MATCHING);
    expect(scanned).toBeGreaterThan(50);
    const offenders = lines.filter((l) => !EXEMPT.some((x) => x.file === l.file && l.line.includes(x.line)));
    expect(offenders.map((l) => `${l.file}:${l.line}`)).toEqual([]);
    for (const x of EXEMPT) expect(lines.filter((l) => l.file === x.file && l.line.includes(x.line)).length, `exemption ${x.file}: ${x.line}`).toBe(1);
  });

  it("errors - no runtime path in src/ throws or rejects with an untyped Error, but for the exemptions listed with why", () => {
    const { lines } = scan(UNTYPED_THROW);
    const offenders = lines.filter((l) => !l.file.startsWith("testing/") && !UNTYPED_EXEMPT.some((x) => x.file === l.file && l.line.includes(x.line)));
    expect(offenders.map((l) => `${l.file}:${l.line}`)).toEqual([]);
    for (const x of UNTYPED_EXEMPT) expect(lines.filter((l) => l.file === x.file && l.line.includes(x.line)).length, `exemption ${x.file}: ${x.line}`).toBe(1);
    for (const bad of [
      "throw new Error(`x`);",
      'if (!ok) throw Object.assign(new Error("x"), { code: "E" });',
      'reject(new Error("x"));',
      "throw fromWire(e) ?? new Error(`x`);",
    ])
      expect(
        UNTYPED_THROW.some((re) => re.test(bad)),
        bad,
      ).toBe(true);
    for (const fine of ["throw new KovaError(ErrorCode.INTERNAL, `x`);", 'done(new Error("aborted"));', 'throw new ConflictError(id, new Error("why"));'])
      expect(UNTYPED_THROW.some((re) => re.test(fine))).toBe(false);
  });

  it("errors - JetStream API codes and classes are checked only in src/bus/nats-errors.ts; everything else uses its predicates", () => {
    const { lines } = scan(INLINE_API_CHECK);
    expect(lines.filter((l) => l.file !== API_CHECKS_LIVE_IN).map((l) => `${l.file}:${l.line}`)).toEqual([]);
    expect(lines.length).toBeGreaterThan(0);
    const bad = [
      "if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return undefined;",
      "if (jsApiCode(err) === 10059) return;",
      "if (err instanceof RequestError && err.isNoResponders()) return;",
    ];
    for (const line of bad)
      expect(
        INLINE_API_CHECK.some((re) => re.test(line)),
        line,
      ).toBe(true);
    expect(INLINE_API_CHECK.some((re) => re.test("if (isStreamNotFound(err)) return undefined;"))).toBe(false);
  });

  it("errors - the scan itself catches the patterns it is meant to forbid", () => {
    const bad = [
      `if (/no responders|503/i.test(message)) {`,
      `if (!/not found/i.test(String(err))) throw err;`,
      `return /wrong last sequence/i.test(String((err as Error)?.message ?? err));`,
      `if (err.message.includes("timeout")) return;`,
      `if ((err as Error).message.includes("stream not found")) return;`,
      `if ((e as NatsError)?.message?.startsWith("503")) retry();`,
      `if (x.message === "no responders") return;`,
      `if ("timeout" === err.message) return;`,
      `if ((cause as Error).message !== "TIMEOUT") throw cause;`,
      "if (/permissions violation/i.test(`${err}`)) return;",
      `if (String(err).includes("wrong last sequence")) return;`,
      `if (String(err as Error).toLowerCase().includes("closed")) return;`,
      'if (`${err}`.includes("503")) return;',
      `if (err.toString().includes("timeout")) return;`,
      "const m = /err_code=(\\d+)/.exec(error.message);",
      `if (e.api_error.description.includes("not found")) return;`,
      // A process's output is the same habit: the launcher's line is caught, and passes only by its exemption.
      "const inUse = /listen tcp \\S*?:(\\d+): bind: address already in use/.exec(log);",
      `if (/address already in use/.test(stderr)) retry();`,
      `if (child.stderr.includes("permission denied")) return;`,
      `if (/EADDRINUSE/.test(result.stderr)) retry();`,
    ];
    for (const line of bad)
      expect(
        MESSAGE_MATCHING.some((re) => re.test(line)),
        line,
      ).toBe(true);
    const fine = [
      `if (isConsumerNotFound(err)) return;`,
      `if (typeof e.message !== "string") return undefined;`,
      `if (typeof spec.description !== "string" || spec.description.trim() === "") {`,
      `if (!/^[a-z][a-z0-9_]*$/.test(reason)) throw new Error("bad reason");`,
      "const text = `${err.message}: retry`;",
      `if (output.startsWith(this.sent)) return this.take(output);`,
    ];
    for (const line of fine)
      expect(
        MESSAGE_MATCHING.some((re) => re.test(line)),
        line,
      ).toBe(false);
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

  it("errors - a layer files its codes under a kind (bad input, not found, timeout, unavailable); an undefined code or a second kind is refused", () => {
    const codes = defineErrorCodes("kind-test-layer", { KIND_TEST_BAD: "KIND_TEST_BAD", KIND_TEST_PLAIN: "KIND_TEST_PLAIN" });
    classifyErrorCodes({ [codes.KIND_TEST_BAD]: "bad_input" });
    expect(errorKindOf(codes.KIND_TEST_BAD)).toBe("bad_input");
    expect(errorKindOf(codes.KIND_TEST_PLAIN)).toBeUndefined();
    // What the layers file: arguments, ids and actor types are bad input; a missing actor is not found.
    const badInput = ["INVALID_ARGUMENT", "INVALID_CONFIG", "INVALID_ID", ActorErrorCode.UNKNOWN_ACTOR_TYPE, BusErrorCode.INVALID_ENVELOPE];
    expect(badInput.map(errorKindOf)).toEqual(Array(5).fill("bad_input"));
    expect([ActorErrorCode.NOT_HOSTED, "TIMEOUT", ActorErrorCode.LEASE_LOST, ActorErrorCode.ACTOR_FAILED].map(errorKindOf)).toEqual([
      "not_found",
      "timeout",
      "unavailable",
      undefined,
    ]);
    expect(() => classifyErrorCodes({ KIND_TEST_NEVER_DEFINED: "bad_input" })).toThrow(/define the code first/);
    expect(() => classifyErrorCodes({ [codes.KIND_TEST_BAD]: "not_found" })).toThrow(/already of kind bad_input/);
  });
});
