import { ResponseTooLargeError } from "./openai-wire.js";

type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

const LF = 0x0a;
const CR = 0x0d;

/**
 * A `fetch` for the `openai` client that cuts off an event stream with a line longer than
 * `maxLineBytes`. The SDK's SSE decoder buffers a whole line before our stream assembler
 * sees any of it, so without this one giant `data:` event (50 MB, no newline) would be
 * held in memory whole, whatever `max_response_bytes` says. Other bodies pass untouched
 * (a non-streamed body is read with its own bound).
 */
export function lineBoundedFetch(maxLineBytes: number, limitBytes: number, inner: Fetch = fetch): Fetch {
  return async (input, init) => {
    const response = await inner(input, init);
    if (!response.body || !/^\s*text\/event-stream/i.test(response.headers.get("content-type") ?? "")) return response;
    let lineBytes = 0;
    const guard = new TransformStream<Uint8Array, Uint8Array>({
      transform(bytes, controller) {
        const lastBreak = Math.max(bytes.lastIndexOf(LF), bytes.lastIndexOf(CR));
        lineBytes = lastBreak === -1 ? lineBytes + bytes.byteLength : bytes.byteLength - lastBreak - 1;
        // Erroring the transform cancels the response body, which closes the connection.
        if (lineBytes > maxLineBytes) controller.error(new ResponseTooLargeError(limitBytes, lineBytes));
        else controller.enqueue(bytes);
      },
    });
    return new Response(response.body.pipeThrough(guard), { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}
