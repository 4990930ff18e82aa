import { StringDecoder } from "node:string_decoder";
import type { Stream } from "node:stream";

/** Longest line kept whole; a server that writes megabytes without a newline must not grow the node's memory. */
export const MAX_LINE_CHARS = 8192;

/**
 * Calls `onLine` for each line `stream` carries (without its `\n` or `\r\n`), and for the
 * unterminated rest when the stream ends. A line longer than `MAX_LINE_CHARS` is handed on
 * in pieces of that size. Multi-byte characters split across chunks are decoded whole.
 */
export function forwardLines(stream: Stream, onLine: (line: string) => void): void {
  const decoder = new StringDecoder("utf8");
  let pending = "";
  const emit = (line: string) => onLine(line.endsWith("\r") ? line.slice(0, -1) : line);
  const take = (text: string) => {
    pending += text;
    let nl = pending.indexOf("\n");
    while (nl >= 0) {
      emit(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
      nl = pending.indexOf("\n");
    }
    while (pending.length > MAX_LINE_CHARS) {
      onLine(pending.slice(0, MAX_LINE_CHARS));
      pending = pending.slice(MAX_LINE_CHARS);
    }
  };
  stream.on("data", (chunk: Buffer | string) => take(typeof chunk === "string" ? chunk : decoder.write(chunk)));
  stream.on("end", () => {
    take(decoder.end());
    if (pending.length > 0) emit(pending);
    pending = "";
  });
}
