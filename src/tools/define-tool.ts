import { z } from "zod";
import { ToolDefinitionError } from "./errors.js";
import { isValidToolName, TOOL_NAME_RULE } from "./names.js";
import type { JsonSchema, Tool, ToolContext } from "./types.js";
import { attachArgumentParser, compileArgumentSchema, describeGiven, jsonPath, type ArgumentIssue } from "./validate.js";

interface ToolSpecBase<A, R> {
  /** See TOOL_NAME_RULE. */
  name: string;
  /** What the model reads to decide when to call the tool: say what it does and returns. */
  description: string;
  /** Whether a call that started before a crash and recorded no result may run again. */
  idempotent: boolean;
  /** Decides idempotency per call when it depends on the arguments (see Tool.idempotentFor). */
  idempotentFor?: (args: A) => boolean;
  requiresApproval?: boolean;
  run(args: A, ctx: ToolContext): Promise<R> | R;
}

/** A tool whose arguments are described by a JSON Schema (`type: "object"` at the top). */
export interface JsonSchemaToolSpec<A, R> extends ToolSpecBase<A, R> {
  parameters: JsonSchema;
  schema?: never;
}

/** A tool whose arguments are a zod schema: the model sees its JSON Schema, `run` gets the parsed value. */
export interface ZodToolSpec<S extends z.ZodType, R> extends ToolSpecBase<z.output<S>, R> {
  schema: S;
  parameters?: never;
}

/**
 * Defines a tool, checking everything that can be checked before a model ever calls it:
 * the name, the description, and that the argument schema compiles.
 *
 * ```ts
 * const add = defineTool({
 *   name: "add", description: "Adds two numbers.", idempotent: true,
 *   schema: z.object({ a: z.number(), b: z.number() }),
 *   run: ({ a, b }) => a + b,
 * });
 * ```
 * @throws ToolDefinitionError naming the tool and what to fix
 */
// A global symbol: a module that imports `kova` from its own install still marks its tools.
const TOOL_MARK = Symbol.for("kova.toolDefinition");

/** True for what `defineTool` returned (a module may export tools next to actors and agents). */
export function isToolDefinition(value: unknown): value is Tool {
  return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[TOOL_MARK] === true;
}

export function defineTool<S extends z.ZodType, R>(spec: ZodToolSpec<S, R>): Tool<z.output<S>, R>;
export function defineTool<A = Record<string, unknown>, R = unknown>(spec: JsonSchemaToolSpec<A, R>): Tool<A, R>;
export function defineTool(spec: JsonSchemaToolSpec<unknown, unknown> | ZodToolSpec<z.ZodType, unknown>): Tool {
  const name = typeof spec.name === "string" ? spec.name : String(spec.name);
  if (!isValidToolName(spec.name)) throw new ToolDefinitionError(name, `invalid name: ${TOOL_NAME_RULE}`);
  if (typeof spec.description !== "string" || spec.description.trim() === "") {
    throw new ToolDefinitionError(name, "needs a description: the model decides from it when to call the tool");
  }
  if (typeof spec.idempotent !== "boolean") {
    throw new ToolDefinitionError(name, "must declare idempotent: true or false (it decides what happens to a call interrupted by a crash)");
  }
  if (typeof spec.run !== "function") throw new ToolDefinitionError(name, "needs a run(args, ctx) function");
  if ((spec.schema === undefined) === (spec.parameters === undefined)) {
    throw new ToolDefinitionError(name, "give exactly one of parameters (a JSON Schema) or schema (a zod schema)");
  }
  const parameters = spec.schema !== undefined ? jsonSchemaOfZod(name, spec.schema) : spec.parameters!;
  if (typeof parameters !== "object" || parameters === null || parameters.type !== "object") {
    throw new ToolDefinitionError(name, 'parameters must be a JSON Schema with type: "object" at the top (models pass arguments as an object)');
  }
  compileArgumentSchema(name, parameters);

  const tool: Tool = {
    name: spec.name,
    description: spec.description,
    parameters,
    idempotent: spec.idempotent,
    ...(spec.idempotentFor ? { idempotentFor: spec.idempotentFor } : {}),
    ...(spec.requiresApproval !== undefined ? { requiresApproval: spec.requiresApproval } : {}),
    run: spec.run,
  };
  Object.defineProperty(tool, TOOL_MARK, { value: true });
  Object.freeze(tool);
  if (spec.schema !== undefined) attachZodParser(tool, spec.schema);
  return tool;
}

function jsonSchemaOfZod(name: string, schema: z.ZodType): JsonSchema {
  let out: JsonSchema;
  try {
    // io "input": optional-with-default fields stay optional for the model. Draft-07 is what
    // model providers document for function parameters; `$schema` is dropped because some
    // providers reject unknown top-level keys.
    out = z.toJSONSchema(schema, { target: "draft-7", io: "input" }) as JsonSchema;
  } catch (err) {
    throw new ToolDefinitionError(name, `its zod schema has no JSON Schema form (${(err as Error).message}): use JSON-representable types`, {
      cause: err,
    });
  }
  const { $schema: _ignored, ...rest } = out;
  return rest;
}

function attachZodParser(tool: Tool, schema: z.ZodType): void {
  attachArgumentParser(tool, (args) => {
    const r = schema.safeParse(args);
    if (r.success) return { ok: true, args: r.data };
    const issues: ArgumentIssue[] = r.error.issues.map((i) => ({
      path: jsonPath(i.path as (string | number)[], args),
      expected: i.message.replace(/^Invalid input: /, ""),
      given: describeGiven(valueAt(args, i.path as PropertyKey[])),
    }));
    return { ok: false, issues };
  });
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let node = root;
  for (const k of path) {
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Record<PropertyKey, unknown>)[k];
  }
  return node;
}
