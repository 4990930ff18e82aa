import type { JsonSchema, Tool, ToolContext } from "../types.js";
import { toolOutput, type McpToolOutput } from "./call-result.js";
import type { McpServerConnection, McpToolDefinition } from "./server-connection.js";

/**
 * Whether a tool may run again after a crash left its outcome unknown. Annotations are the
 * server's word: `idempotentHint` (same call, same effect) or `readOnlyHint` (no effect at
 * all); no annotation means not idempotent (MCP's own default for idempotentHint is false).
 * The config's `idempotent_tools` list overrides both.
 */
export function isIdempotent(def: McpToolDefinition, overrides: ReadonlySet<string>): boolean {
  return overrides.has(def.name) || def.annotations?.idempotentHint === true || def.annotations?.readOnlyHint === true;
}

/**
 * One MCP tool as a Kova `Tool` named `<server>/<tool>`: the server's input schema is what
 * the model sees and what arguments are validated against; the result is mapped to JSON
 * for the model and capped at `maxResultBytes` (see `toolOutput`).
 */
export function mcpTool(
  connection: McpServerConnection,
  def: McpToolDefinition,
  overrides: ReadonlySet<string>,
  maxResultBytes?: number,
): Tool<Record<string, unknown>, McpToolOutput> {
  const name = `${connection.name}/${def.name}`;
  const idempotent = isIdempotent(def, overrides);
  return Object.freeze({
    name,
    description: def.description ?? def.title ?? def.annotations?.title ?? "",
    parameters: def.inputSchema as JsonSchema,
    idempotent,
    /**
     * @throws McpToolError when the tool reports an error; the errors of McpServerConnection.callTool otherwise
     */
    async run(args: Record<string, unknown>, ctx: ToolContext): Promise<McpToolOutput> {
      return toolOutput(name, await connection.callTool(def.name, args ?? {}, ctx, idempotent), maxResultBytes);
    },
  });
}
