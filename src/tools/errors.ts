import { defineErrorCodes, KovaError, type KovaErrorOptions, describeError } from "../core/index.js";
import type { ArgumentIssue } from "./validate.js";

/**
 * The tools layer's failures. Most of them reach the model as a tool result (see
 * `invokeTool`), so each message says what was refused and what the model can do instead;
 * none leaks more of the host than the caller already gave (paths are shown as written).
 * Other files of this layer (shell, db, MCP) may register more codes under "tools".
 */
export const ToolsErrorCode = defineErrorCodes("tools", {
  TOOL_DEFINITION_INVALID: "TOOL_DEFINITION_INVALID",
  TOOL_NAME_CONFLICT: "TOOL_NAME_CONFLICT",
  TOOL_ARGUMENTS_INVALID: "TOOL_ARGUMENTS_INVALID",
  TOOL_FAILED: "TOOL_FAILED",
  FILE_PATH_REFUSED: "FILE_PATH_REFUSED",
  FILE_TYPE_REFUSED: "FILE_TYPE_REFUSED",
  FILE_NOT_FOUND: "FILE_NOT_FOUND",
  FILE_EXISTS: "FILE_EXISTS",
  FILE_TOO_LARGE: "FILE_TOO_LARGE",
  HTTP_TARGET_REFUSED: "HTTP_TARGET_REFUSED",
  HTTP_REQUEST_REFUSED: "HTTP_REQUEST_REFUSED",
  HTTP_REQUEST_FAILED: "HTTP_REQUEST_FAILED",
  HTTP_TOO_MANY_REDIRECTS: "HTTP_TOO_MANY_REDIRECTS",
  WEB_SEARCH_FAILED: "WEB_SEARCH_FAILED",
  EXPRESSION_SYNTAX: "EXPRESSION_SYNTAX",
  EXPRESSION_UNDEFINED: "EXPRESSION_UNDEFINED",
});

/** A tool definition is malformed (a programming error, found when the tool is defined). */
export class ToolDefinitionError extends KovaError {
  constructor(
    readonly tool: string,
    message: string,
    options: KovaErrorOptions = {},
  ) {
    super(ToolsErrorCode.TOOL_DEFINITION_INVALID, `tool ${JSON.stringify(tool)}: ${message}`, {
      ...options,
      data: { tool, ...(options.data as object | undefined) },
    });
  }
}

/** Two tools claim one name in a registry. */
export class ToolNameConflictError extends KovaError {
  constructor(readonly tool: string) {
    super(ToolsErrorCode.TOOL_NAME_CONFLICT, `tool ${JSON.stringify(tool)} is already registered: give one of them another name`, { data: { tool } });
  }
}

/**
 * The model kept sending arguments that do not match a tool's schema after every repair
 * attempt the run allows; the run ends with this error.
 */
export class ToolArgumentsInvalidError extends KovaError {
  constructor(
    readonly tool: string,
    readonly attempts: number,
    readonly issues: readonly ArgumentIssue[],
    /** The model kept calling a tool it was not offered (a wrong name, not wrong arguments). */
    unknownTool = false,
  ) {
    const first = issues[0];
    super(
      ToolsErrorCode.TOOL_ARGUMENTS_INVALID,
      unknownTool
        ? `the model kept calling tool ${JSON.stringify(tool)}, which it was not offered, after ${attempts} repair attempt(s)` +
            (first ? ` (offered: ${first.expected.replace(/^one of the offered tools \((.*)\)$/, "$1")})` : "") +
            "; check the agent's tools list (kova tools ls <agent>) and whether its prompt names tools it does not have"
        : `tool ${JSON.stringify(tool)}: arguments still invalid after ${attempts} repair attempt(s)` +
            (first ? ` (${first.path}: expected ${first.expected}, given ${first.given})` : "") +
            `; raise the agent's repair limit or make the tool's schema and description clearer`,
      { data: { tool, attempts, issues, ...(unknownTool ? { unknownTool } : {}) } },
    );
  }
}

/** A tool's own code threw something that is not a KovaError; the original is the cause. */
export class ToolFailedError extends KovaError {
  constructor(
    readonly tool: string,
    cause: unknown,
  ) {
    super(ToolsErrorCode.TOOL_FAILED, `tool ${JSON.stringify(tool)} failed: ${describeError(cause)}`, {
      cause,
      data: { tool },
    });
  }
}

/** A path that is not inside the file tools' root, or cannot be a file name at all. */
export class FilePathRefusedError extends KovaError {
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super(ToolsErrorCode.FILE_PATH_REFUSED, `path ${JSON.stringify(path)} refused: ${reason}`, { data: { path, reason } });
  }
}

/** The path names something other than a regular file (a device, FIFO, socket or directory). */
export class FileTypeRefusedError extends KovaError {
  constructor(
    readonly path: string,
    readonly kind: string,
  ) {
    super(ToolsErrorCode.FILE_TYPE_REFUSED, `path ${JSON.stringify(path)} is a ${kind}: only regular files can be read or written`, { data: { path, kind } });
  }
}

export class FileNotFoundError extends KovaError {
  constructor(
    readonly path: string,
    what = "file",
    hint = "paths are relative to the file root",
  ) {
    super(ToolsErrorCode.FILE_NOT_FOUND, `${what} ${JSON.stringify(path)} does not exist (${hint})`, { data: { path } });
  }
}

/** file_write with `mode: "create"` found the file already there. */
export class FileExistsError extends KovaError {
  constructor(readonly path: string) {
    super(ToolsErrorCode.FILE_EXISTS, `file ${JSON.stringify(path)} already exists: use mode "overwrite" to replace it`, {
      data: { path },
    });
  }
}

/** Content over the configured size cap. */
export class FileTooLargeError extends KovaError {
  constructor(
    readonly path: string,
    bytes: number,
    limit: number,
  ) {
    super(ToolsErrorCode.FILE_TOO_LARGE, `content for ${JSON.stringify(path)} is ${bytes} bytes, over the limit of ${limit}: write it in smaller files`, {
      data: { path, bytes, limit },
    });
  }
}

/**
 * The SSRF guard, the scheme rule or the host lists refused a request target. Never
 * retryable: the same URL is refused again.
 */
export class HttpTargetRefusedError extends KovaError {
  constructor(
    readonly target: string,
    reason: string,
  ) {
    super(ToolsErrorCode.HTTP_TARGET_REFUSED, `request to ${target} refused: ${reason}`, { data: { target, reason } });
  }
}

/** The request itself (not its target) is not allowed: a method, a header, a body too large. */
export class HttpRequestRefusedError extends KovaError {
  constructor(reason: string) {
    super(ToolsErrorCode.HTTP_REQUEST_REFUSED, `request refused: ${reason}`, { data: { reason } });
  }
}

/** Connecting, sending or reading failed (reset, refused, TLS, malformed response). */
export class HttpRequestFailedError extends KovaError {
  constructor(
    readonly target: string,
    reason: string,
    options: KovaErrorOptions = {},
  ) {
    super(ToolsErrorCode.HTTP_REQUEST_FAILED, `request to ${target} failed: ${reason}`, {
      retryable: true,
      ...options,
      data: { target, reason },
    });
  }
}

export class HttpTooManyRedirectsError extends KovaError {
  constructor(
    readonly target: string,
    max: number,
  ) {
    super(ToolsErrorCode.HTTP_TOO_MANY_REDIRECTS, `request to ${target} was redirected more than ${max} times: request the final URL directly`, {
      data: { target, max },
    });
  }
}

/** The search endpoint failed or answered something that is not a result list. */
export class WebSearchFailedError extends KovaError {
  constructor(reason: string, options: KovaErrorOptions = {}) {
    super(ToolsErrorCode.WEB_SEARCH_FAILED, `web search failed: ${reason}`, { retryable: true, ...options });
  }
}

/** The calculator could not parse the expression; `position` is 0-based. */
export class ExpressionSyntaxError extends KovaError {
  constructor(
    message: string,
    readonly position: number,
  ) {
    super(ToolsErrorCode.EXPRESSION_SYNTAX, `${message} at position ${position}`, { data: { position } });
  }
}

/** The expression parses but has no finite value (division by zero, sqrt(-1), overflow). */
export class ExpressionUndefinedError extends KovaError {
  constructor(message: string) {
    super(ToolsErrorCode.EXPRESSION_UNDEFINED, message);
  }
}
