import { request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from "node:http";
import { request as httpsRequest } from "node:https";
import type { LookupFunction } from "node:net";
import { KovaError, KovaTimeoutError } from "../../core/index.js";
import { HttpRequestFailedError } from "../errors.js";
import { utf8Boundary } from "../result-cap.js";

/**
 * One HTTP exchange, no redirects followed, with the limits every outbound request of the
 * tools layer needs: a deadline (an AbortSignal), a cap on the response body that stops
 * reading (and closes the connection) at the cap rather than buffering first, and an
 * optional `lookup` (the SSRF guard). Built on node:http rather than fetch because fetch
 * (undici) takes a custom lookup only through a dispatcher of the undici package, which
 * Kova does not depend on.
 */
export interface HttpExchange {
  method: string;
  url: URL;
  headers: OutgoingHttpHeaders;
  body?: Buffer;
  /** Resolves the host at connect time (the SSRF guard); default: the system resolver. */
  lookup?: LookupFunction;
  signal: AbortSignal;
  /** Body bytes kept; reading stops there and `truncated` is set. */
  maxResponseBytes: number;
}

export interface HttpReply {
  status: number;
  statusText: string;
  headers: Record<string, string | string[]>;
  body: Buffer;
  truncated: boolean;
}

/**
 * Sends one request and reads the response up to the cap.
 * @throws KovaTimeoutError when `signal` aborts with a KovaTimeoutError reason (a deadline);
 *   the lookup's own error (HttpTargetRefusedError from the SSRF guard) as it is;
 *   HttpRequestFailedError for connection, TLS and protocol failures
 */
export function exchange(x: HttpExchange): Promise<HttpReply> {
  const target = x.url.origin;
  return new Promise<HttpReply>((resolve, reject) => {
    let settled = false;
    const fail = (err: unknown): void => {
      if (settled) return;
      settled = true;
      reject(mapError(err, target, x.signal));
    };
    const send = x.url.protocol === "https:" ? httpsRequest : httpRequest;
    let req: ReturnType<typeof httpRequest>;
    try {
      req = send(x.url, {
        method: x.method,
        headers: x.headers,
        // A fresh connection per exchange: a pooled socket would skip the lookup, and so
        // the check, for a later request to the same host.
        agent: false,
        signal: x.signal,
        ...(x.lookup ? { lookup: x.lookup } : {}),
      });
    } catch (err) {
      fail(err);
      return;
    }
    req.on("error", fail);
    req.on("response", (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let kept = 0;
      let truncated = false;
      const finish = (): void => {
        if (settled) return;
        settled = true;
        let body = Buffer.concat(chunks, kept);
        if (truncated) body = body.subarray(0, utf8Boundary(body, body.length));
        resolve({
          status: res.statusCode ?? 0,
          statusText: res.statusMessage ?? "",
          headers: res.headers as Record<string, string | string[]>,
          body,
          truncated,
        });
      };
      res.on("data", (chunk: Buffer) => {
        if (truncated) return;
        const room = x.maxResponseBytes - kept;
        if (chunk.length > room) {
          chunks.push(chunk.subarray(0, room));
          kept += room;
          truncated = true;
          finish();
          // Stop the transfer: the rest is never read, so a huge body costs nothing more.
          res.destroy();
          req.destroy();
          return;
        }
        chunks.push(chunk);
        kept += chunk.length;
      });
      res.on("end", finish);
      res.on("error", fail);
      res.on("close", () => {
        if (!res.complete) fail(new Error("connection closed before the response ended"));
      });
    });
    req.end(x.body);
  });
}

function mapError(err: unknown, target: string, signal: AbortSignal): unknown {
  if (err instanceof KovaError) return err;
  if (signal.aborted && signal.reason instanceof KovaError) return signal.reason;
  const e = err as NodeJS.ErrnoException;
  const reason = signal.aborted ? "aborted" : e.code ? `${e.code}: ${e.message}` : String(e.message ?? err);
  return new HttpRequestFailedError(target, reason, { cause: err });
}

/**
 * A signal that aborts with a KovaTimeoutError after `ms`, or when `parent` aborts (with its
 * reason). Call `dispose` when done so the timer does not outlive the request.
 */
export function deadlineSignal(ms: number, what: string, parent?: AbortSignal): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new KovaTimeoutError(what, ms)), ms);
  const onParent = (): void => controller.abort(parent!.reason);
  if (parent?.aborted) onParent();
  else parent?.addEventListener("abort", onParent, { once: true });
  return {
    signal: controller.signal,
    dispose: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onParent);
    },
  };
}
