/**
 * What goes back to the model: a tool's result serialized to text and capped in UTF-8
 * bytes, because every byte is paid for in the context window of every later model call.
 * A cut never splits a UTF-8 sequence or a UTF-16 surrogate pair, and says so visibly.
 */

/** Default cap of one tool result sent to the model (16 KiB, about 4k tokens). */
export const DEFAULT_RESULT_MAX_BYTES = 16 * 1024;
/** The smallest cap that still leaves room for the marker and some content. */
export const MIN_RESULT_MAX_BYTES = 128;

export interface CappedText {
  text: string;
  truncated: boolean;
  /** UTF-8 size of the whole text before the cut. */
  totalBytes: number;
}

/**
 * Serializes a tool's return value: strings as they are, anything else as JSON (bigints as
 * strings, cycles as "[Circular]", undefined as the empty string).
 */
export function serializeToolResult(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === undefined) return "";
  try {
    // The common case, at the speed of plain JSON.stringify (a replacer costs ~3x).
    return JSON.stringify(value) ?? String(value);
  } catch {
    // bigint or a cycle: the slow path below handles both
  }
  const seen = new WeakSet<object>();
  return (
    JSON.stringify(value, (_k, v: unknown) => {
      if (typeof v === "bigint") return v.toString();
      if (typeof v === "object" && v !== null) {
        if (seen.has(v)) return "[Circular]";
        seen.add(v);
      }
      return v;
    }) ?? String(value)
  );
}

/**
 * The longest prefix of `text` that fits in `maxBytes` of UTF-8, cut between code points.
 * Encodes at most `maxBytes` characters of the input, so a huge text costs no more than its cap.
 */
export function truncateUtf8(text: string, maxBytes: number): CappedText {
  const totalBytes = Buffer.byteLength(text, "utf8");
  if (totalBytes <= maxBytes) return { text, truncated: false, totalBytes };
  // Every UTF-16 unit is at least one byte, so the answer lies within the first maxBytes units.
  let head = text.slice(0, maxBytes + 1);
  if (isHighSurrogate(head.charCodeAt(head.length - 1))) head = head.slice(0, -1);
  const buf = Buffer.from(head, "utf8");
  return { text: buf.subarray(0, utf8Boundary(buf, maxBytes)).toString("utf8"), truncated: true, totalBytes };
}

/**
 * The largest `n <= limit` such that `buf[0..n)` ends on a UTF-8 character boundary. For
 * byte streams cut by a size cap (an HTTP body, a file read) before they are decoded.
 */
export function utf8Boundary(buf: Uint8Array, limit: number): number {
  if (limit >= buf.length) return trimIncompleteTail(buf, buf.length);
  let n = limit;
  // buf[n] is the first byte left out: while it continues a sequence, that sequence straddles the cut.
  while (n > 0 && (buf[n]! & 0xc0) === 0x80) n--;
  return n;
}

/** For a buffer that ends mid-sequence (a stream stopped by a cap), the length without the partial last character. */
function trimIncompleteTail(buf: Uint8Array, end: number): number {
  let start = end;
  let back = 0;
  while (start > 0 && back < 4 && (buf[start - 1]! & 0xc0) === 0x80) {
    start--;
    back++;
  }
  if (start === 0) return end;
  const lead = buf[start - 1]!;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return end - (start - 1) >= need ? end : start - 1;
}

/**
 * `text` cut to at most `maxChars` UTF-16 units with "…" at the end when cut, never
 * between the two halves of a surrogate pair. For short excerpts in messages.
 */
export function shortenText(text: string, maxChars: number): string {
  if (text.length <= maxChars) return text;
  let end = maxChars - 1;
  if (isHighSurrogate(text.charCodeAt(end - 1))) end--;
  return `${text.slice(0, end)}…`;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/**
 * Caps text for the model: unchanged when it fits, else a prefix plus a marker saying how
 * much was cut, the two together within `maxBytes`.
 * @throws RangeError when maxBytes is below MIN_RESULT_MAX_BYTES
 */
export function capText(text: string, maxBytes = DEFAULT_RESULT_MAX_BYTES): CappedText {
  if (!Number.isInteger(maxBytes) || maxBytes < MIN_RESULT_MAX_BYTES) {
    throw new RangeError(`maxBytes must be an integer of at least ${MIN_RESULT_MAX_BYTES}`);
  }
  const totalBytes = Buffer.byteLength(text, "utf8");
  if (totalBytes <= maxBytes) return { text, truncated: false, totalBytes };
  // Sized for the largest count first, so the marker's digits cannot push the total over.
  const room = maxBytes - Buffer.byteLength(marker(totalBytes, totalBytes), "utf8");
  const head = truncateUtf8(text, room).text;
  return { text: head + marker(Buffer.byteLength(head, "utf8"), totalBytes), truncated: true, totalBytes };
}

function marker(shown: number, total: number): string {
  return `\n[… truncated by Kova: showing the first ${shown} of ${total} bytes]`;
}

/** Serializes and caps a tool's return value in one step. */
export function toolResultText(value: unknown, maxBytes = DEFAULT_RESULT_MAX_BYTES): CappedText {
  return capText(serializeToolResult(value), maxBytes);
}
