import type { CallToolResult, ContentBlock } from "@modelcontextprotocol/sdk/types.js";
import { McpToolError } from "./errors.js";

/** A non-text content block, summarised: the model gets what it is and how big, not the bytes. */
export type McpAttachment =
  | { type: "image" | "audio"; mimeType: string; bytes: number }
  | { type: "resource"; uri: string; mimeType?: string; bytes: number }
  | { type: "resource_link"; uri: string; name: string; mimeType?: string; bytes?: number; description?: string }
  | { type: string; note: string };

/** What an MCP tool call returns to the agent: JSON it can hand to the model as is. */
export interface McpToolOutput {
  /** The text blocks, joined with newlines. */
  text?: string;
  /** The server's structured result, as it sent it. */
  structuredContent?: unknown;
  /** Images, audio and resources, one summary each, in content order. */
  attachments?: McpAttachment[];
}

/**
 * Maps a `tools/call` result to JSON for the model. When the text is only the JSON form of
 * `structuredContent` (what the spec asks servers to send for older clients), the text is
 * dropped: the model would read the same data twice.
 * @throws McpToolError when the server marked the result `isError`, with the mapped result as data
 */
export function toolOutput(tool: string, result: CallToolResult): McpToolOutput {
  const texts: string[] = [];
  const attachments: McpAttachment[] = [];
  for (const block of result.content ?? []) {
    if (block.type === "text") texts.push(block.text);
    else attachments.push(summarise(block));
  }
  const out: McpToolOutput = {};
  const text = texts.join("\n");
  const structured = result.structuredContent;
  if (texts.length > 0 && !(structured !== undefined && sameJson(text, structured))) out.text = text;
  if (structured !== undefined) out.structuredContent = structured;
  if (attachments.length > 0) out.attachments = attachments;
  if (result.isError === true) throw new McpToolError(tool, text, out);
  return out;
}

function summarise(block: ContentBlock): McpAttachment {
  switch (block.type) {
    case "image":
    case "audio":
      return { type: block.type, mimeType: block.mimeType, bytes: Buffer.byteLength(block.data, "base64") };
    case "resource": {
      const r = block.resource;
      const bytes = "blob" in r ? Buffer.byteLength(r.blob, "base64") : Buffer.byteLength(r.text, "utf8");
      return r.mimeType === undefined ? { type: "resource", uri: r.uri, bytes } : { type: "resource", uri: r.uri, mimeType: r.mimeType, bytes };
    }
    case "resource_link": {
      const link: McpAttachment = { type: "resource_link", uri: block.uri, name: block.name };
      if (block.mimeType !== undefined) link.mimeType = block.mimeType;
      if (block.size !== undefined) link.bytes = block.size;
      if (block.description !== undefined) link.description = block.description;
      return link;
    }
    default:
      return { type: (block as { type: string }).type, note: "content of a kind this client does not show" };
  }
}

function sameJson(text: string, value: unknown): boolean {
  try {
    return JSON.stringify(JSON.parse(text)) === JSON.stringify(value);
  } catch {
    return false;
  }
}
