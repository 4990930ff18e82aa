import { describe, expect, it } from "vitest";
import { z } from "zod";
import { defineTool } from "../../src/tools/define-tool.js";
import { ToolArgumentsInvalidError, ToolDefinitionError } from "../../src/tools/errors.js";
import { checkToolCall } from "../../src/tools/invoke.js";
import { ArgumentRepairBudget } from "../../src/tools/repair-budget.js";
import { GIVEN_MAX, validateArguments } from "../../src/tools/validate.js";

const fetchTool = defineTool({
  name: "fetch_page",
  description: "Fetches a page.",
  idempotent: true,
  parameters: {
    type: "object",
    properties: {
      url: { type: "string", format: "uri" },
      method: { enum: ["GET", "HEAD"] },
      retries: { type: "integer", minimum: 0, maximum: 5 },
      headers: { type: "object", additionalProperties: { type: "string" } },
      tags: { type: "array", items: { type: "string" } },
      timeout_ms: { type: "integer", default: 1000 },
    },
    required: ["url"],
    additionalProperties: false,
  },
  run: (args) => args,
});

describe("tool argument validation", () => {
  it("validate - every issue carries the JSON path, what was expected and what was given", () => {
    const r = validateArguments(fetchTool, JSON.stringify({ method: "POST", retries: 9, headers: { Accept: 3 }, tags: ["a", 7], extra: true }));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.issues).toEqual(
      expect.arrayContaining([
        { path: "$.url", expected: "a value (required property)", given: "nothing" },
        { path: "$.extra", expected: expect.stringContaining('no property "extra" (allowed: url, method'), given: "true (boolean)" },
        { path: "$.method", expected: 'one of "GET", "HEAD"', given: '"POST" (string)' },
        { path: "$.retries", expected: "a number <= 5", given: "9 (number)" },
        { path: "$.headers.Accept", expected: "string", given: "3 (number)" },
        { path: "$.tags[1]", expected: "string", given: "7 (number)" },
      ]),
    );
    expect(r.issues).toHaveLength(6);
  });

  it("validate - a format failure names the format; keys that are not identifiers are quoted in the path", () => {
    const r = validateArguments(fetchTool, { url: "not a uri", headers: { "x-odd key": 1 } });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.issues).toContainEqual({ path: "$.url", expected: 'a string in format "uri"', given: '"not a uri" (string)' });
    expect(r.issues).toContainEqual({ path: '$.headers["x-odd key"]', expected: "string", given: "1 (number)" });
  });

  it("validate - invalid JSON is a repairable issue at $ showing the text given, shortened", () => {
    const raw = `{"url": "https://example.com", ${"x".repeat(200)}`;
    const r = validateArguments(fetchTool, raw);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.issues).toHaveLength(1);
    expect(r.issues[0]!.path).toBe("$");
    expect(r.issues[0]!.expected).toMatch(/^a JSON object of arguments \(.*position/);
    expect(r.issues[0]!.given.length).toBeLessThanOrEqual(GIVEN_MAX);
    expect(r.issues[0]!.given.startsWith('{"url": "https://example.com"')).toBe(true);
  });

  it("validate - a JSON value that is not an object is refused; an empty string means no arguments", () => {
    const arr = validateArguments(fetchTool, "[1,2]");
    expect(arr).toEqual({ ok: false, issues: [{ path: "$", expected: "a JSON object of arguments", given: "[1,2] (array)" }] });
    const empty = validateArguments(fetchTool, "  ");
    expect(empty.ok).toBe(false);
    if (!empty.ok) expect(empty.issues[0]!.path).toBe("$.url");
  });

  it("validate - valid arguments pass with the schema's defaults filled in", () => {
    const r = validateArguments(fetchTool, '{"url":"https://example.com/a"}');
    expect(r).toEqual({ ok: true, args: { url: "https://example.com/a", timeout_ms: 1000 } });
  });

  it("validate - a zod tool's refinements are issues too, and run receives the parsed value", async () => {
    const tool = defineTool({
      name: "range_sum",
      description: "Sums a range.",
      idempotent: true,
      schema: z
        .object({ from: z.number().int(), to: z.number().int(), label: z.string().default("sum") })
        .refine((v) => v.from <= v.to, { message: "from must not exceed to", path: ["to"] }),
      run: ({ from, to, label }) => `${label}=${((from + to) * (to - from + 1)) / 2}`,
    });
    expect(tool.parameters.type).toBe("object");
    expect(tool.parameters.$schema).toBeUndefined();
    expect(tool.parameters.required).toEqual(["from", "to"]);
    const bad = validateArguments(tool, '{"from": 5, "to": 1}');
    expect(bad).toEqual({ ok: false, issues: [{ path: "$.to", expected: "from must not exceed to", given: "1 (number)" }] });
    const typed = validateArguments(tool, '{"from": 1.5, "to": 2}');
    expect(typed.ok).toBe(false);
    if (!typed.ok) expect(typed.issues[0]).toMatchObject({ path: "$.from", given: "1.5 (number)" });
    const good = validateArguments(tool, '{"from": 1, "to": 4}');
    expect(good).toEqual({ ok: true, args: { from: 1, to: 4, label: "sum" } });
    if (good.ok) expect(await tool.run(good.args, undefined as never)).toBe("sum=10");
  });

  it("validate - draft 2020-12 and draft-07 schemas from providers both compile", () => {
    const t2020 = defineTool({
      name: "t2020",
      description: "x",
      idempotent: true,
      parameters: {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        type: "object",
        properties: { a: { type: "array", prefixItems: [{ type: "string" }] } },
      },
      run: () => null,
    });
    const bad = validateArguments(t2020, { a: [1] });
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.issues[0]).toMatchObject({ path: "$.a[0]", expected: "string" });
    const t7 = defineTool({
      name: "t7",
      description: "x",
      idempotent: true,
      parameters: { $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { n: { type: "number", exclusiveMinimum: 0 } } },
      run: () => null,
    });
    const r = validateArguments(t7, { n: 0 });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.issues[0]).toEqual({ path: "$.n", expected: "a number > 0", given: "0 (number)" });
  });

  it("defineTool - refuses bad names, missing descriptions and schemas that do not compile", () => {
    const base = { description: "d", idempotent: true, parameters: { type: "object" }, run: () => null };
    expect(() => defineTool({ ...base, name: "has space" })).toThrow(ToolDefinitionError);
    expect(() => defineTool({ ...base, name: "a.b" })).toThrow(/invalid name/);
    expect(() => defineTool({ ...base, name: "ok", description: " " })).toThrow(/needs a description/);
    expect(() => defineTool({ ...base, name: "ok", parameters: { type: "string" } })).toThrow(/type: "object"/);
    expect(() => defineTool({ ...base, name: "ok", parameters: { type: "object", properties: { a: { type: "nope" } } } })).toThrow(/not a valid JSON Schema/);
    expect(defineTool({ ...base, name: "everything/echo.v2" }).name).toBe("everything/echo.v2");
    expect(defineTool({ ...base, name: "agent:researcher" }).name).toBe("agent:researcher");
  });
});

describe("argument repair budget", () => {
  it("repair - two invalid calls per run are sent back for repair, the third ends the run with TOOL_ARGUMENTS_INVALID", () => {
    const budget = new ArgumentRepairBudget();
    const first = checkToolCall(fetchTool, "{}", budget);
    expect(first.status).toBe("invalid");
    if (first.status !== "invalid") return;
    expect(first.verdict).toEqual({ action: "repair", attempt: 1, remaining: 1 });
    const content = JSON.parse(first.content);
    expect(content.error.code).toBe("TOOL_ARGUMENTS_INVALID");
    expect(content.error.message).toContain("1 repair attempt(s) left");
    expect(content.error.issues).toEqual([{ path: "$.url", expected: "a value (required property)", given: "nothing" }]);

    expect(checkToolCall(fetchTool, '{"url":"https://a.example"}', budget).status).toBe("valid");
    const second = checkToolCall(fetchTool, "{oops", budget);
    expect(second.status === "invalid" && second.verdict).toEqual({ action: "repair", attempt: 2, remaining: 0 });
    const third = checkToolCall(fetchTool, '{"url": 1}', budget);
    expect(third.status).toBe("invalid");
    if (third.status !== "invalid" || third.verdict.action !== "fail") throw new Error("expected fail");
    expect(third.verdict.error).toBeInstanceOf(ToolArgumentsInvalidError);
    expect(third.verdict.error.code).toBe("TOOL_ARGUMENTS_INVALID");
    expect(third.verdict.error.message).toContain("$.url: expected string, given 1 (number)");
  });

  it("repair - a budget of zero ends the run at the first invalid call; a rebuilt budget continues the count", () => {
    expect(new ArgumentRepairBudget(0).onInvalid("t", []).action).toBe("fail");
    const rebuilt = new ArgumentRepairBudget(2, 2);
    expect(rebuilt.remaining).toBe(0);
    expect(rebuilt.onInvalid("t", []).action).toBe("fail");
  });
});
