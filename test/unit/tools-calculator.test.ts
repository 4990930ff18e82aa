import { describe, expect, it } from "vitest";
import { isKovaError } from "../../src/core/errors.js";
import { createCalculatorTools, evaluate } from "../../src/tools/builtin/calculator.js";
import { clockNow, createClockTools } from "../../src/tools/builtin/clock-now.js";
import { ExpressionSyntaxError } from "../../src/tools/errors.js";
import { callTool } from "../fixtures/tool-call.js";

function failure(expression: string): { code: string; message: string; position?: number } {
  try {
    evaluate(expression);
  } catch (err) {
    if (!isKovaError(err)) throw err;
    return { code: err.code, message: err.message, position: err instanceof ExpressionSyntaxError ? err.position : undefined };
  }
  throw new Error(`expected ${JSON.stringify(expression)} to fail`);
}

describe("calculator", () => {
  it("calculator - follows precedence, associativity and unary minus as in mathematics", () => {
    const cases: Array<[string, number]> = [
      ["1 + 2 * 3", 7],
      ["(1 + 2) * 3", 9],
      ["2 ^ 3 ^ 2", 512],
      ["-2 ^ 2", -4],
      ["(-2) ^ 2", 4],
      ["2 ^ -1", 0.5],
      ["--3", 3],
      ["-(-3)", 3],
      ["10 - 4 - 3", 3],
      ["100 / 10 / 5", 2],
      ["7 % 3 * 2", 2],
      ["-7 % 3", -1],
      ["0.1 + 0.2", 0.3],
      [".5 + 1.", 1.5],
      ["1e3 + 2.5E-1", 1000.25],
      ["sqrt(16) + abs(-3)", 7],
      ["round(2.345, 2)", 2.35],
      ["min(4, 2, 8) + max(1, 9)", 11],
      ["pow(2, 10)", 1024],
      ["log(e) + log10(1000) + log2(8) + ln(1)", 7],
      ["log(8, 2)", 3],
      ["2 * pi", 6.28318530717959],
      ["sin(0) + cos(0)", 1],
      ["floor(-1.5) + ceil(1.2) + trunc(-1.7)", -1],
      ["SQRT(9)", 3],
      ["  3  ", 3],
    ];
    for (const [expr, expected] of cases) expect(evaluate(expr), expr).toBe(expected);
  });

  it("calculator - syntax errors say what is wrong and where", () => {
    expect(failure("1 +")).toMatchObject({ code: "EXPRESSION_SYNTAX", position: 3 });
    expect(failure("1 +").message).toContain("ends too early");
    expect(failure("(1 + 2")).toMatchObject({ position: 6 });
    expect(failure("(1 + 2").message).toContain('expected ")" to close the parenthesis at position 0');
    expect(failure("1 + 2)").message).toContain("no matching opening parenthesis");
    expect(failure("2(3)").message).toContain("write * to multiply");
    expect(failure("2 ** 3")).toMatchObject({ position: 3 });
    expect(failure("1.2.3").message).toContain("malformed number");
    expect(failure("foo(1)").message).toContain('unknown function "foo"');
    expect(failure("x + 1").message).toContain('unknown name "x"');
    expect(failure("sqrt 4").message).toContain("needs parentheses");
    expect(failure("max(1,)")).toMatchObject({ code: "EXPRESSION_SYNTAX" });
    expect(failure("pow(2)").message).toContain("pow takes 2 argument(s), not 1");
    expect(failure("1 & 2").message).toContain('unexpected character "&"');
    expect(failure("process.exit(1)")).toMatchObject({ code: "EXPRESSION_SYNTAX" });
    expect(failure(`${"(".repeat(100)}1${")".repeat(100)}`).message).toContain("nested more than 64 levels");
    expect(failure(`${"1+".repeat(600)}1`).message).toContain("longer than 1000 characters");
  });

  it("calculator - expressions without a finite value are clear errors, not Infinity or NaN", () => {
    for (const [expr, text] of [
      ["1 / 0", "division by zero"],
      ["5 % 0", "modulo by zero"],
      ["sqrt(-1)", "sqrt of a negative number"],
      ["ln(0)", "not positive"],
      ["0 ^ -1", "division by zero"],
      ["(-8) ^ (1/3)", "fractional power"],
      ["10 ^ 400", "overflow"],
      ["asin(2)", "from -1 to 1"],
    ] as const) {
      expect(failure(expr), expr).toMatchObject({ code: "EXPRESSION_UNDEFINED" });
      expect(failure(expr).message, expr).toContain(text);
    }
  });

  it("calculator - the tool returns the result and reports errors as tool errors", async () => {
    const [tool] = createCalculatorTools();
    expect((await callTool(tool!, { expression: "(3 + 4) * 2 ^ 3 / sqrt(16)" })).value).toEqual({ expression: "(3 + 4) * 2 ^ 3 / sqrt(16)", result: 14 });
    const bad = await callTool(tool!, { expression: "1 / 0" });
    expect(bad.status).toBe("error");
    expect(JSON.parse(bad.content)).toMatchObject({ error: { code: "EXPRESSION_UNDEFINED", message: "division by zero" } });
  });
});

describe("clock_now", () => {
  it("clock_now - reports UTC and a time zone's local time and offset; an unknown zone is INVALID_ARGUMENT", async () => {
    const t = Date.UTC(2026, 2, 29, 0, 30, 0); // the night Paris moves to summer time
    expect(clockNow(t, "Europe/Paris")).toEqual({
      iso: "2026-03-29T00:30:00.000Z",
      epoch_ms: t,
      timezone: "Europe/Paris",
      local: "2026-03-29 01:30:00",
      utc_offset: "+01:00",
      weekday: "Sunday",
    });
    expect(clockNow(t + 3 * 3600_000, "Europe/Paris")).toMatchObject({ local: "2026-03-29 05:30:00", utc_offset: "+02:00" });
    expect(clockNow(t, "Asia/Kolkata")).toMatchObject({ utc_offset: "+05:30", local: "2026-03-29 06:00:00" });
    const [tool] = createClockTools({ now: () => t });
    expect((await callTool(tool!, {})).value).toMatchObject({ timezone: "UTC", local: "2026-03-29 00:30:00", utc_offset: "+00:00" });
    const bad = await callTool(tool!, { timezone: "Mars/Olympus" });
    expect(bad.error).toMatchObject({ code: "INVALID_ARGUMENT" });
    expect(bad.error?.message).toContain("unknown time zone");
  });
});
