import { defineErrorCodes, KovaError, type KovaErrorOptions } from "../../core/index.js";

/**
 * The MCP client's failures. Codes carry the `MCP_` prefix because the tools layer's other
 * files register their own codes under the same layer name.
 */
export const McpErrorCode = defineErrorCodes("tools", {
  MCP_SERVER_UNAVAILABLE: "MCP_SERVER_UNAVAILABLE",
  MCP_CONNECTION_LOST: "MCP_CONNECTION_LOST",
  MCP_CALL_TIMEOUT: "MCP_CALL_TIMEOUT",
  MCP_CALL_ABORTED: "MCP_CALL_ABORTED",
  MCP_TOOL_ERROR: "MCP_TOOL_ERROR",
  MCP_REQUEST_FAILED: "MCP_REQUEST_FAILED",
  MCP_SERVER_CLOSED: "MCP_SERVER_CLOSED",
  MCP_UNKNOWN_SERVER: "MCP_UNKNOWN_SERVER",
});
export type McpErrorCode = (typeof McpErrorCode)[keyof typeof McpErrorCode];

/**
 * The server cannot take calls now: it is restarting after a crash, could not be started,
 * or its HTTP endpoint does not answer. Nothing was sent, so a retry is safe.
 */
export class McpServerUnavailableError extends KovaError {
  constructor(
    readonly server: string,
    reason: string,
    options: KovaErrorOptions = {},
  ) {
    super(McpErrorCode.MCP_SERVER_UNAVAILABLE, `MCP server "${server}" is unavailable (${reason}): retry later; \`kova tools ls\` shows its state`, {
      retryable: true,
      ...options,
      data: { server, reason, ...(options.data as object | undefined) },
    });
  }
}

/**
 * The connection ended while a call was in flight: the server may or may not have done the
 * work. Retryable only when the tool is idempotent.
 */
export class McpConnectionLostError extends KovaError {
  readonly outcome = "unknown" as const;
  constructor(
    readonly tool: string,
    idempotent: boolean,
    options: KovaErrorOptions = {},
  ) {
    super(
      McpErrorCode.MCP_CONNECTION_LOST,
      `MCP tool ${tool}: the server went away during the call, so its outcome is unknown; ` +
        (idempotent ? "the tool is idempotent, calling it again is safe" : "check its effect before calling it again"),
      { retryable: idempotent, ...options, data: { tool, outcome: "unknown" } },
    );
  }
}

/** A call ran past the server's `timeout_ms` (or the caller's deadline); the server was told to cancel it. */
export class McpCallTimeoutError extends KovaError {
  /**
   * @param key the config key of the limit, e.g. `mcp.servers[0].timeout_ms`
   * @param byDeadline the caller's deadline, not `timeout_ms`, set the limit
   */
  constructor(
    readonly tool: string,
    readonly timeoutMs: number,
    key: string,
    byDeadline = false,
  ) {
    super(
      McpErrorCode.MCP_CALL_TIMEOUT,
      byDeadline
        ? `MCP tool ${tool}: the caller's deadline passed (${Math.max(0, timeoutMs)} ms left at the call) before it answered; the call was cancelled`
        : `MCP tool ${tool} did not answer within ${timeoutMs} ms and was cancelled: raise ${key} if it is expected to take longer`,
      { retryable: true, data: { tool, timeoutMs, byDeadline } },
    );
  }
}

/** The caller's AbortSignal fired (interrupt, kill, lease loss); the server was told to cancel the call. */
export class McpCallAbortedError extends KovaError {
  constructor(
    readonly tool: string,
    cause: unknown,
  ) {
    super(McpErrorCode.MCP_CALL_ABORTED, `MCP tool ${tool}: the call was aborted by its caller`, {
      cause,
      data: { tool },
    });
  }
}

/**
 * The tool ran and reported a failure (`isError: true`). `data.result` holds the mapped
 * result (its text and any structured content), for the model to read and correct its call.
 */
export class McpToolError extends KovaError {
  constructor(
    readonly tool: string,
    text: string,
    result: unknown,
  ) {
    super(McpErrorCode.MCP_TOOL_ERROR, `MCP tool ${tool} reported an error: ${text || "(no message)"}`, {
      data: { tool, result },
    });
  }
}

/**
 * The server answered the request with a protocol error (unknown tool, invalid parameters,
 * internal error) or an answer that does not fit the protocol.
 */
export class McpRequestFailedError extends KovaError {
  constructor(
    readonly tool: string,
    readonly mcpCode: number | undefined,
    detail: string,
    options: KovaErrorOptions = {},
  ) {
    super(McpErrorCode.MCP_REQUEST_FAILED, `MCP tool ${tool}: the server refused the call: ${detail}`, {
      ...options,
      data: { tool, mcpCode },
    });
  }
}

/** The connection or manager was closed (node shutting down); nothing more is sent. */
export class McpServerClosedError extends KovaError {
  constructor(readonly server: string) {
    super(McpErrorCode.MCP_SERVER_CLOSED, `MCP server "${server}" is closed: the node is shutting down`, {
      data: { server },
    });
  }
}

/** A name that no `[[mcp.servers]]` entry defines. */
export class McpUnknownServerError extends KovaError {
  constructor(
    readonly server: string,
    known: readonly string[],
  ) {
    super(
      McpErrorCode.MCP_UNKNOWN_SERVER,
      `no MCP server named "${server}": add a [[mcp.servers]] entry with name = "${server}"; configured: ${known.join(", ") || "(none)"}`,
      { data: { server, known: [...known] } },
    );
  }
}
