/**
 * What of an error may reach an end user: an answer that names a failed part, the
 * gateway's OpenAI-compatible and A2A errors, the web view. Errors name the agent or model
 * and say what to do; what only an operator should see is taken out of their text:
 * endpoints (URLs, `host:port`, addresses), file paths, keys and tokens, stack traces.
 * Operators keep the whole error in the node's logs and the events (docs/protocol.md,
 * "Errors on the wire"). A failure of the infrastructure (core's ErrorFamily) is not the
 * user's to fix: its text (which points an operator at a server, a stream or a disk) is
 * replaced by what the user can do, try again.
 */
import { errorFamilyOf, errorKindOf } from "./errors.js";

/** An error as an end user gets it: its code and a message without internals. */
export interface PublicError {
  code: string;
  message: string;
}

const MAX_CHARS = 1_000;

/** Replacement, pattern: applied in this order (a URL before the `host:port` inside it). */
const SCRUBS: ReadonlyArray<readonly [RegExp, string]> = [
  // Stack frames, from the first one on.
  [/\n\s*at [\s\S]*$/, ""],
  // URLs of any scheme (http, nats, postgres, file…), credentials and query included.
  [/\b[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^\s"'<>()[\]{}]+/g, "(endpoint)"],
  // Keys and tokens: provider keys, bearer tokens, `key=value` secrets, long opaque strings.
  [/\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}/g, "(secret)"],
  [/\bBearer\s+[A-Za-z0-9._~+/=-]+/gi, "Bearer (secret)"],
  [/\b(api[_-]?key|apikey|token|password|passwd|secret|authorization)(\s*[=:]\s*)"?[^\s"',;)]+/gi, "$1$2(secret)"],
  [/\b[A-Za-z0-9+/_]{32,}={0,2}(?![A-Za-z0-9+/_=])/g, "(secret)"],
  // Addresses: IPv4 and IPv6 with or without a port, and `name.domain:port`.
  [/\[[0-9a-fA-F:.]+\](?::\d+)?/g, "(endpoint)"],
  [/\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b/g, "(endpoint)"],
  [/\b(?:localhost|[a-zA-Z0-9][a-zA-Z0-9-]*(?:\.[a-zA-Z0-9-]+)+):\d{2,5}\b/g, "(endpoint)"],
  // Absolute file paths (POSIX, home, Windows).
  [/(^|[\s'"(=:,[])(?:\/[\w.@+~-]+){2,}\/?/g, "$1(path)"],
  [/(^|[\s'"(=:,[])~\/[^\s'"),;]+/g, "$1(path)"],
  [/\b[A-Za-z]:\\[^\s'"),;]+/g, "(path)"],
];

/** `text` with endpoints, file paths, keys and stack traces taken out (and at most 1,000 characters). */
export function publicText(text: string): string {
  let out = text;
  for (const [pattern, replacement] of SCRUBS) out = out.replace(pattern, replacement);
  return out.length > MAX_CHARS ? `${out.slice(0, MAX_CHARS)}…` : out;
}

/** What an end user reads for a failure of the infrastructure, by its kind. */
const INFRASTRUCTURE_TEXT = {
  timeout: "the service did not answer in time; try again later, or allow more time",
  unavailable: "a part of the service is unavailable for now; try again later",
} as const;

/**
 * An error (a wire error, a run's `error`, anything with a code and a message) as an end
 * user may see it: the code kept, the message scrubbed (an infrastructure failure's
 * replaced), `data` and causes left out.
 */
export function publicError(err: { code?: unknown; message?: unknown } | undefined, fallback: PublicError): PublicError {
  const code = typeof err?.code === "string" && err.code.length > 0 ? err.code : fallback.code;
  if (errorFamilyOf(code) === "infrastructure") return { code, message: INFRASTRUCTURE_TEXT[errorKindOf(code) === "timeout" ? "timeout" : "unavailable"] };
  const message = typeof err?.message === "string" && err.message.length > 0 ? err.message : fallback.message;
  return { code, message: publicText(message) };
}
