/**
 * MCP servers as tools: `[[mcp.servers]]` parsing, one connection per server, and the
 * manager that offers their tools to the registry as `<server>/<tool>`. Importing this
 * module does not load the MCP SDK; starting a server does.
 */
export { mcpConfigFrom, DEFAULT_MCP_TIMEOUT_MS } from "./config.js";
export type { McpConfig, McpConfigOptions, McpServerConfig, McpStdioServerConfig, McpHttpServerConfig, McpStartMode } from "./config.js";
export { McpManager } from "./manager.js";
export type { McpManagerOptions, McpToolProvider } from "./manager.js";
export { McpServerConnection } from "./server-connection.js";
export type { McpConnectionOptions, McpServerState, McpServerStatus, McpToolDefinition } from "./server-connection.js";
export { mcpTool, isIdempotent } from "./mcp-tool.js";
export { toolOutput } from "./call-result.js";
export type { McpToolOutput, McpAttachment } from "./call-result.js";
export { DEFAULT_RESTART_POLICY } from "./backoff.js";
export type { RestartPolicy } from "./backoff.js";
export {
  McpErrorCode,
  McpServerUnavailableError,
  McpConnectionLostError,
  McpCallTimeoutError,
  McpCallAbortedError,
  McpToolError,
  McpRequestFailedError,
  McpServerClosedError,
  McpUnknownServerError,
} from "./errors.js";
