/**
 * Kova's tools layer: the Tool interface, defineTool, the registry agents resolve their
 * `tools` lists against, argument validation with bounded repair, result capping, the
 * built-in tools and their `[tools]` config.
 */
export type { JsonSchema, Tool, ToolContext } from "./types.js";
export { defineTool, isToolDefinition, type JsonSchemaToolSpec, type ZodToolSpec } from "./define-tool.js";
export { ToolRegistry, type ToolDescription, type ToolProvider } from "./registry.js";
export { ToolSet, type ModelToolSpec } from "./tool-set.js";
export { isValidToolName, MCP_PREFIX, TOOL_NAME_RULE } from "./names.js";
export { idempotencyClass, isIdempotentCall, type IdempotencyClass } from "./idempotency.js";
export { compileArgumentSchema, validateAgainstSchema, validateArguments, type ArgumentCheck, type ArgumentIssue } from "./validate.js";
export { ArgumentRepairBudget, DEFAULT_ARGUMENT_REPAIRS, type RepairVerdict } from "./repair-budget.js";
export { capText, DEFAULT_RESULT_MAX_BYTES, serializeToolResult, toolResultText, truncateUtf8, type CappedText } from "./result-cap.js";
export { checkToolCall, runTool, type ToolCallCheck, type ToolRunOutcome } from "./invoke.js";
export { builtinTools, toolsConfigFrom, type ToolsConfig } from "./config.js";
export { createFileTools, fileConfigFrom, type FileToolConfig } from "./builtin/file.js";
export { createHttpTools, httpConfigFrom, type HttpToolConfig, type HttpToolDeps } from "./builtin/http.js";
export { checkedAddresses, systemResolver, type Resolver } from "./builtin/ssrf-guard.js";
export type { AddressPolicyOptions } from "./builtin/address-policy.js";
export {
  createWebSearchTools,
  searxngAdapter,
  webSearchConfigFrom,
  type SearchAdapter,
  type SearchQuery,
  type SearchResult,
  type WebSearchConfig,
} from "./builtin/web-search.js";
export { createClockTools } from "./builtin/clock-now.js";
export { createCalculatorTools, evaluate } from "./builtin/calculator.js";
export {
  ExpressionSyntaxError,
  ExpressionUndefinedError,
  FileExistsError,
  FileNotFoundError,
  FilePathRefusedError,
  FileTooLargeError,
  FileTypeRefusedError,
  HttpRequestFailedError,
  HttpRequestRefusedError,
  HttpTargetRefusedError,
  HttpTooManyRedirectsError,
  ToolArgumentsInvalidError,
  ToolDefinitionError,
  ToolFailedError,
  ToolNameConflictError,
  ToolsErrorCode,
  WebSearchFailedError,
} from "./errors.js";
// For the layers above (every import from another layer comes through this file).
export { type McpConfig, mcpConfigFrom } from "./mcp/config.js";
export { McpManager } from "./mcp/manager.js";
export { type ToolPattern, parseToolPattern } from "./names.js";
