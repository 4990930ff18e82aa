/**
 * The MCP SDK, imported on first use: a node whose config names no MCP server (or only lazy
 * ones nobody has used yet) never loads it (docs/architecture.md, "Feature levels").
 */
export interface McpSdk {
  Client: typeof import("@modelcontextprotocol/sdk/client/index.js").Client;
  StdioClientTransport: typeof import("@modelcontextprotocol/sdk/client/stdio.js").StdioClientTransport;
  StreamableHTTPClientTransport: typeof import("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPClientTransport;
  StreamableHTTPError: typeof import("@modelcontextprotocol/sdk/client/streamableHttp.js").StreamableHTTPError;
  types: typeof import("@modelcontextprotocol/sdk/types.js");
}

let loading: Promise<McpSdk> | undefined;

/** The SDK's client modules, loaded once per process. */
export function loadMcpSdk(): Promise<McpSdk> {
  loading ??= (async () => {
    const [client, stdio, http, types] = await Promise.all([
      import("@modelcontextprotocol/sdk/client/index.js"),
      import("@modelcontextprotocol/sdk/client/stdio.js"),
      import("@modelcontextprotocol/sdk/client/streamableHttp.js"),
      import("@modelcontextprotocol/sdk/types.js"),
    ]);
    return {
      Client: client.Client,
      StdioClientTransport: stdio.StdioClientTransport,
      StreamableHTTPClientTransport: http.StreamableHTTPClientTransport,
      StreamableHTTPError: http.StreamableHTTPError,
      types,
    };
  })();
  return loading;
}
