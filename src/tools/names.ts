/**
 * Tool names. Three forms share one namespace: tools defined in code and built-ins
 * (`http_request`), MCP tools (`<server>/<tool>`; MCP allows dots in tool names) and agents
 * offered as tools (`agent:<id>`). The alphabet keeps them safe as journal keys and log
 * fields; the model sees them through `modelToolName`, because OpenAI-compatible APIs
 * accept only `[A-Za-z0-9_-]{1,64}` as a function name.
 */
const PLAIN = /^[A-Za-z0-9_-]{1,64}$/;
const MCP = /^[A-Za-z0-9_-]{1,64}\/[A-Za-z0-9_.-]{1,128}$/;
const AGENT = /^agent:[A-Za-z0-9_-]{1,128}$/;

/** The prefix an agent's `tools` list may put before an MCP pattern (`mcp:everything/*`). */
export const MCP_PREFIX = "mcp:";

export function isValidToolName(name: unknown): name is string {
  return typeof name === "string" && (PLAIN.test(name) || MCP.test(name) || AGENT.test(name));
}

/** What a valid name looks like, for error messages. */
export const TOOL_NAME_RULE = "use 1-64 characters from [A-Za-z0-9_-], or <server>/<tool> for MCP tools, or agent:<id> for agents";

/** One entry of an agent's `tools` list, normalised: the `mcp:` prefix removed. */
export interface ToolPattern {
  /** As written in the config (for error messages). */
  readonly written: string;
  /** Without the `mcp:` prefix. */
  readonly name: string;
  readonly wildcard: boolean;
  /** For a pattern like `everything/*`: `everything` (the MCP server or other namespace it names). */
  readonly namespace?: string;
  matches(toolName: string): boolean;
}

/**
 * Parses one `tools` entry. `*` matches any run of characters except `/`, so `everything/*`
 * is every tool of the MCP server `everything`, `*` every tool without a server, `agent:*`
 * every agent offered as a tool.
 * @returns undefined when the entry is not a valid name or pattern
 */
export function parseToolPattern(written: string): ToolPattern | undefined {
  let name = written;
  if (name.startsWith(MCP_PREFIX)) {
    name = name.slice(MCP_PREFIX.length);
    if (!name.includes("/")) return undefined;
  }
  const wildcard = name.includes("*");
  const probe = wildcard ? name.replace(/\*/g, "x") : name;
  if (!isValidToolName(probe)) return undefined;
  const slash = name.indexOf("/");
  const namespace = slash > 0 && !name.slice(0, slash).includes("*") ? name.slice(0, slash) : undefined;
  if (!wildcard) {
    return { written, name, wildcard, namespace, matches: (t) => t === name };
  }
  const re = new RegExp(`^${name.split("*").map(escapeRegExp).join("[^/]*")}$`);
  return { written, name, wildcard, namespace, matches: (t) => re.test(t) };
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
