import type { CallToolResult, ContentBlock } from "@modelcontextprotocol/sdk/types.js";
import { capText, DEFAULT_RESULT_MAX_BYTES } from "../result-cap.js";
import { McpToolError } from "./errors.js";

/** A non-text content block, summarised: the model gets what it is and how big, not the bytes. */
export type McpAttachment =
  | { type: "image" | "audio"; mimeType: string; bytes: number }
  | { type: "resource"; uri: string; mimeType?: string; bytes: number }
  | { type: "resource_link"; uri: string; name: string; mimeType?: string; bytes?: number; description?: string }
  | { type: string; note: string };

/** What an MCP tool call returns to the agent: JSON it can hand to the model as is. */
export interface McpToolOutput {
  /** The text blocks, joined with newlines (capped, with Kova's marker when cut). */
  text?: string;
  /**
   * The server's structured result, as it sent it; when its JSON is longer than the cap, that
   * JSON as text, capped with the marker.
   */
  structuredContent?: unknown;
  /** Images, audio and resources, one summary each, in content order (at most MAX_ATTACHMENTS). */
  attachments?: McpAttachment[];
  /** How many summaries were left out past MAX_ATTACHMENTS. */
  moreAttachments?: number;
}

/** Summaries kept of one result's non-text blocks; the rest are counted. */
export const MAX_ATTACHMENTS = 32;

/**
 * Maps a `tools/call` result to JSON for the model, capped before it goes anywhere: the text
 * and the structured content at `maxBytes` each (UTF-8, with Kova's truncation marker), the
 * attachment summaries at MAX_ATTACHMENTS. Every other tool bounds its result at the
 * source (rows, bytes read, output); an MCP server's result is only as small as the server
 * makes it, and uncapped it would be serialized whole and, as an error's data, journaled
 * whole. When the text is only the JSON form of `structuredContent` (what the spec asks
 * servers to send for older clients), the text is dropped: the model would read the same
 * data twice.
 * @param maxBytes the cap of one tool result (`[tools] max_result_bytes`)
 * @throws McpToolError when the server marked the result `isError`, with the mapped (capped) result as data
 */
export function toolOutput(tool: string, result: CallToolResult, maxBytes = DEFAULT_RESULT_MAX_BYTES): McpToolOutput {
  const texts: string[] = [];
  const attachments: McpAttachment[] = [];
  let blocks = 0;
  for (const block of result.content ?? []) {
    if (block.type === "text") texts.push(block.text);
    else if (blocks++ < MAX_ATTACHMENTS) attachments.push(summarise(block));
  }
  const out: McpToolOutput = {};
  const text = texts.join("\n");
  const structured = result.structuredContent;
  if (texts.length > 0 && !(structured !== undefined && sameJson(text, structured))) out.text = capText(text, maxBytes).text;
  if (structured !== undefined) out.structuredContent = cappedJson(structured, maxBytes);
  if (attachments.length > 0) out.attachments = attachments;
  if (blocks > MAX_ATTACHMENTS) out.moreAttachments = blocks - MAX_ATTACHMENTS;
  if (result.isError === true) throw new McpToolError(tool, out.text ?? "", out);
  return out;
}

/** The value as it is when its JSON fits `maxBytes`; else that JSON, cut, as text. */
function cappedJson(value: unknown, maxBytes: number): unknown {
  const json = JSON.stringify(value) ?? "null";
  const capped = capText(json, maxBytes);
  return capped.truncated ? capped.text : value;
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
