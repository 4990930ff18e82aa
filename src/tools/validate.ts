import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import { Ajv2019 } from "ajv/dist/2019.js";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { ToolDefinitionError } from "./errors.js";
import { shortenText } from "./result-cap.js";
import type { JsonSchema, Tool } from "./types.js";

/**
 * Argument validation. Models send a tool's arguments as a JSON string; this parses it,
 * checks it against the tool's JSON Schema with ajv (compiled once per schema object), and
 * on failure returns issues the model can act on: where (a JSON path), what the schema
 * expected, and what was given (shortened). Invalid JSON is an issue like any other, so the
 * model can repair it within the run's repair budget (see ArgumentRepairBudget).
 */

/** One thing wrong with a call's arguments. */
export interface ArgumentIssue {
  /** JSON path into the arguments: `$`, `$.headers`, `$.items[2].name`. */
  readonly path: string;
  readonly expected: string;
  /** The value found there, shortened to at most GIVEN_MAX characters, or `nothing`. */
  readonly given: string;
}

export type ArgumentCheck<A = unknown> = { readonly ok: true; readonly args: A } | { readonly ok: false; readonly issues: readonly ArgumentIssue[] };

/**
 * A parser that runs after the JSON Schema check (a zod schema's `safeParse`): it may
 * transform the arguments or report issues the schema could not express (refinements).
 */
export type ArgumentParser = (args: unknown) => ArgumentCheck;

/** Longest `given` shown for one issue: enough to recognise the value, short enough for the context window. */
export const GIVEN_MAX = 80;
/** At most this many issues go back to the model; the rest are counted in the last one. */
const MAX_ISSUES = 10;

const parsers = new WeakMap<Tool, ArgumentParser>();
const compiled = new WeakMap<object, ValidateFunction>();
let instances: { draft7: Ajv; draft2019: Ajv2019; draft2020: Ajv2020 } | undefined;

/** Used by defineTool for zod tools: validation runs the zod schema after the JSON Schema. */
export function attachArgumentParser(tool: Tool, parse: ArgumentParser): void {
  parsers.set(tool, parse);
}

/**
 * Compiles a tool's schema (once; later calls reuse it). Called by defineTool so that a bad
 * schema fails where the tool is defined, and lazily for tools from providers (MCP).
 * @throws ToolDefinitionError when ajv cannot compile the schema
 */
export function compileArgumentSchema(toolName: string, schema: JsonSchema): ValidateFunction {
  const hit = compiled.get(schema);
  if (hit) return hit;
  const { $schema, ...body } = schema;
  // The meta-schema picks the draft; an unknown or absent one is treated as draft-07, which
  // is what MCP servers and OpenAI examples write. `$schema` itself is dropped so that a
  // meta-schema URL ajv does not bundle cannot fail the compile.
  const ajv = ajvFor(typeof $schema === "string" ? $schema : "");
  let fn: ValidateFunction;
  try {
    fn = ajv.compile(body);
  } catch (err) {
    throw new ToolDefinitionError(toolName, `its parameters are not a valid JSON Schema: ${(err as Error).message}`, { cause: err });
  }
  compiled.set(schema, fn);
  return fn;
}

function ajvFor(metaSchema: string): Ajv {
  if (!instances) {
    // allErrors: the model fixes every problem in one repair turn, not one per turn.
    // verbose: errors carry the offending data and schema, for `given` and `expected`.
    // useDefaults: `run` sees the defaults its schema declares.
    const options = { allErrors: true, verbose: true, strict: false, useDefaults: true } as const;
    instances = { draft7: new Ajv(options), draft2019: new Ajv2019(options), draft2020: new Ajv2020(options) };
    for (const a of Object.values(instances)) addFormats.default(a);
  }
  if (metaSchema.includes("2020-12")) return instances.draft2020;
  if (metaSchema.includes("2019-09")) return instances.draft2019;
  return instances.draft7;
}

/**
 * Parses and validates a call's arguments as the model sent them.
 * @param raw the model's JSON string (empty means `{}`), or an already-parsed value
 * @throws ToolDefinitionError when the tool's own schema does not compile
 */
export function validateArguments<A = unknown>(tool: Tool<A>, raw: unknown): ArgumentCheck<A> {
  // The validator fills in defaults in place: never in the caller's object.
  let args: unknown = typeof raw === "object" && raw !== null ? structuredClone(raw) : raw;
  if (typeof raw === "string") {
    if (raw.trim() === "") {
      args = {};
    } else {
      try {
        args = JSON.parse(raw);
      } catch (err) {
        return invalid([{ path: "$", expected: `a JSON object of arguments (${(err as Error).message})`, given: shorten(raw) }]);
      }
    }
  }
  if (typeof args !== "object" || args === null || Array.isArray(args)) {
    return invalid([{ path: "$", expected: "a JSON object of arguments", given: describeGiven(args) }]);
  }
  const validate = compileArgumentSchema(tool.name, tool.parameters);
  if (!validate(args)) return invalid(issuesFromAjv(validate.errors ?? [], args));
  const parse = parsers.get(tool);
  if (parse) return parse(args) as ArgumentCheck<A>;
  return { ok: true, args: args as A };
}

/**
 * Validates any JSON value (not only an object of arguments) against a JSON Schema, with
 * the issues argument validation gives: what a verifier of structured output uses.
 * @param name names the schema in the error when it does not compile
 * @throws ToolDefinitionError when the schema does not compile
 */
export function validateAgainstSchema(schema: JsonSchema, value: unknown, name = "schema"): ArgumentCheck {
  const validate = compileArgumentSchema(name, schema);
  // The validator fills in defaults in place: never in the caller's value.
  const copy = typeof value === "object" && value !== null ? structuredClone(value) : value;
  if (!validate(copy)) return invalid(issuesFromAjv(validate.errors ?? [], copy));
  return { ok: true, args: copy };
}

function invalid(issues: ArgumentIssue[]): { ok: false; issues: ArgumentIssue[] } {
  if (issues.length > MAX_ISSUES) {
    const rest = issues.length - MAX_ISSUES + 1;
    issues = [...issues.slice(0, MAX_ISSUES - 1), { path: "$", expected: `${rest} more issue(s) not shown`, given: "-" }];
  }
  return { ok: false, issues };
}

function issuesFromAjv(errors: readonly ErrorObject[], root: unknown): ArgumentIssue[] {
  const out: ArgumentIssue[] = [];
  const seen = new Set<string>();
  for (const e of errors) {
    const segments = pointerSegments(e.instancePath);
    const issue = issueFor(e, segments, root);
    const key = `${issue.path}\u0000${issue.expected}`;
    if (!seen.has(key)) {
      seen.add(key);
      out.push(issue);
    }
  }
  return out;
}

function issueFor(e: ErrorObject, segments: string[], root: unknown): ArgumentIssue {
  const p = e.params as Record<string, unknown>;
  const here = { path: jsonPath(segments, root), given: describeGiven(e.data) };
  switch (e.keyword) {
    case "required":
      return { path: jsonPath([...segments, String(p.missingProperty)], root), expected: "a value (required property)", given: "nothing" };
    case "additionalProperties": {
      const name = String(p.additionalProperty);
      const props = Object.keys(((e.parentSchema as Record<string, unknown>)?.properties as object) ?? {});
      return {
        path: jsonPath([...segments, name], root),
        expected: `no property ${JSON.stringify(name)}${props.length > 0 ? ` (allowed: ${props.join(", ")})` : ""}`,
        given: describeGiven((e.data as Record<string, unknown>)?.[name]),
      };
    }
    case "type":
      return { ...here, expected: String(p.type).split(",").join(" or ") };
    case "enum":
      return { ...here, expected: `one of ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(", ")}` };
    case "const":
      return { ...here, expected: JSON.stringify(p.allowedValue) };
    case "format":
      return { ...here, expected: `a string in format ${JSON.stringify(p.format)}` };
    case "pattern":
      return { ...here, expected: `a string matching /${String(p.pattern)}/` };
    case "minLength":
      return { ...here, expected: `a string of at least ${String(p.limit)} character(s)` };
    case "maxLength":
      return { ...here, expected: `a string of at most ${String(p.limit)} character(s)` };
    case "minimum":
    case "maximum":
    case "exclusiveMinimum":
    case "exclusiveMaximum":
      return { ...here, expected: `a number ${String(p.comparison)} ${String(p.limit)}` };
    case "multipleOf":
      return { ...here, expected: `a multiple of ${String(p.multipleOf)}` };
    case "minItems":
      return { ...here, expected: `an array of at least ${String(p.limit)} item(s)` };
    case "maxItems":
      return { ...here, expected: `an array of at most ${String(p.limit)} item(s)` };
    case "minProperties":
    case "maxProperties":
      return { ...here, expected: `an object with ${e.keyword === "minProperties" ? "at least" : "at most"} ${String(p.limit)} propert(ies)` };
    case "uniqueItems":
      return { ...here, expected: `an array without duplicates (items ${String(p.j)} and ${String(p.i)} are equal)` };
    case "anyOf":
    case "oneOf":
      return { ...here, expected: `a value matching ${e.keyword === "oneOf" ? "exactly one" : "at least one"} of the alternatives in the schema` };
    default:
      return { ...here, expected: `a value that ${e.message ?? `satisfies "${e.keyword}"`}` };
  }
}

/** Decodes a JSON Pointer (`/a/0/b~1c`) into its segments. */
function pointerSegments(pointer: string): string[] {
  if (pointer === "") return [];
  return pointer
    .slice(1)
    .split("/")
    .map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"));
}

/**
 * Segments as a JSON path (`$.items[2].name`, `$["odd key"]`), walking the data so that
 * an array index and an object key that looks like a number are told apart.
 */
export function jsonPath(segments: readonly (string | number)[], root: unknown): string {
  let path = "$";
  let node: unknown = root;
  for (const seg of segments) {
    const s = String(seg);
    if (Array.isArray(node) && /^\d+$/.test(s)) path += `[${s}]`;
    else if (/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(s)) path += `.${s}`;
    else path += `[${JSON.stringify(s)}]`;
    node = typeof node === "object" && node !== null ? (node as Record<string, unknown>)[s] : undefined;
  }
  return path;
}

/** A value as the model will see it in an issue: JSON, shortened, with its type when that helps. */
export function describeGiven(value: unknown): string {
  if (value === undefined) return "nothing";
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  const kind = value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
  return `${shorten(text)} (${kind})`;
}

function shorten(text: string): string {
  return shortenText(text, GIVEN_MAX);
}
