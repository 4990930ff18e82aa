/**
 * Every failure Kova reports has a stable code. Codes are part of the public
 * contract: they travel over NATS (see `toWire` / `fromWire`) and CLI scripts match
 * on them, so rename none and add with care. Core defines the codes every layer
 * shares; a layer defines its own with `defineErrorCodes` in its own `errors.ts`, so an
 * upper layer never edits a lower one.
 */
const registered = new Map<string, string>();

/**
 * What kind of failure a code reports. A layer files its codes under a kind where it defines
 * them (`classifyErrorCodes`), so no upper layer keeps a list that must grow a case for every
 * code a layer adds. The kind decides the code's family (`errorFamilyOf`) and the class that
 * protocols answering with a class rather than a code use (the `kova-node` service's
 * `Nats-Service-Error-Code`: 400, 404, 503, 504). A code of no kind is the run's own
 * failure (500 where a class is needed).
 */
export const ErrorKind = {
  /** The caller sent something wrong (an argument, an id, a config, a message); retrying as is fails again. */
  BAD_INPUT: "bad_input",
  /** What the caller named is not there (not hosted here, no such run or approval). */
  NOT_FOUND: "not_found",
  /** Nothing answered in time (NATS, a node, an agent): the same request may succeed later. */
  TIMEOUT: "timeout",
  /** The machinery under the work failed or moved (the WAL, the NATS connection, the step journal, a lease). */
  UNAVAILABLE: "unavailable",
} as const;
export type ErrorKind = (typeof ErrorKind)[keyof typeof ErrorKind];

/**
 * Whose failure an error is, which decides who handles it:
 * - `infrastructure`: the cluster's (a timeout or an unavailable part): nothing the run or
 *   the caller did. A turn does not end on it: the runtime keeps the message and resumes
 *   the turn, on this node or the actor's next host.
 * - `user`: the caller's (bad input, something named that is not there): the message
 *   says what to change; retrying as is fails again.
 * - `run`: the work's own (a model, a budget, a tool, a policy, a defect): a run ends
 *   `failed` with it, and an asker gets it.
 */
export type ErrorFamily = "infrastructure" | "user" | "run";

const FAMILY_OF_KIND: Record<ErrorKind, ErrorFamily> = {
  bad_input: "user",
  not_found: "user",
  timeout: "infrastructure",
  unavailable: "infrastructure",
};

const kinds = new Map<string, ErrorKind>();

/**
 * Registers a layer's error codes (each key equal to its value, SCREAMING_SNAKE) and
 * returns them frozen, for use as `const XErrorCode = defineErrorCodes("x", {...})`.
 * A registered code arriving over the wire is rebuilt with that code (see RemoteError).
 * @throws Error when a code is malformed or already defined by another layer (a
 *   programming error, found at import time)
 */
export function defineErrorCodes<const T extends Record<string, string>>(layer: string, codes: T): Readonly<T> {
  for (const [key, code] of Object.entries(codes)) {
    if (key !== code || !/^[A-Z][A-Z0-9_]*$/.test(code)) {
      throw new Error(`error code ${key}: must be SCREAMING_SNAKE and equal to its key`);
    }
    const owner = registered.get(code);
    if (owner !== undefined && owner !== layer) throw new Error(`error code ${code} is already defined by ${owner}`);
    registered.set(code, layer);
  }
  return Object.freeze(codes);
}

/**
 * Files defined codes under their kind, next to where the layer defines them:
 * `classifyErrorCodes({ [XErrorCode.NO_SUCH_X]: "not_found" })`.
 * @throws Error for a code no layer defined, or one already filed under another kind
 */
export function classifyErrorCodes(kindOf: Readonly<Record<string, ErrorKind>>): void {
  for (const [code, kind] of Object.entries(kindOf)) {
    if (!registered.has(code)) throw new Error(`error kind of ${code}: define the code first (defineErrorCodes)`);
    const before = kinds.get(code);
    if (before !== undefined && before !== kind) throw new Error(`error code ${code} is already of kind ${before}`);
    kinds.set(code, kind);
  }
}

/** True for a code some loaded layer defined. */
export function isKnownErrorCode(code: string): boolean {
  return registered.has(code);
}

/** The kind its layer gave `code` (also for a RemoteError, which keeps the sender's code), or undefined. */
export function errorKindOf(code: string): ErrorKind | undefined {
  return kinds.get(code);
}

/**
 * The family of `code` (see ErrorFamily), from the kind its layer filed it under: known for
 * every code of a layer this process loaded, `run` for any other.
 */
export function errorFamilyOf(code: string): ErrorFamily {
  const kind = kinds.get(code);
  return kind === undefined ? "run" : FAMILY_OF_KIND[kind];
}

export const ErrorCode = defineErrorCodes("core", {
  // configuration and input
  INVALID_CONFIG: "INVALID_CONFIG",
  INVALID_ARGUMENT: "INVALID_ARGUMENT",
  /** A record written in a format version this build does not read (a newer node wrote it). */
  UNSUPPORTED_FORMAT: "UNSUPPORTED_FORMAT",
  INVALID_ID: "INVALID_ID",
  // NATS and transport
  TIMEOUT: "TIMEOUT",
  REMOTE_ERROR: "REMOTE_ERROR",
  /**
   * Work stopped by a signal (an interrupt, a kill, a stop) before it finished: a turn, a
   * tool call, a run. Defined here, below every layer that stops work or is stopped.
   */
  INTERRUPTED: "INTERRUPTED",
  INTERNAL: "INTERNAL",
});
classifyErrorCodes({
  [ErrorCode.INVALID_CONFIG]: "bad_input",
  [ErrorCode.INVALID_ARGUMENT]: "bad_input",
  [ErrorCode.INVALID_ID]: "bad_input",
  [ErrorCode.TIMEOUT]: "timeout",
});

/** A code of core's list; layers' codes are plain strings defined with defineErrorCodes. */
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** The shape an error takes on the wire (payload or headers). */
export interface WireError {
  code: string;
  message: string;
  retryable: boolean;
  data?: unknown;
}

export interface KovaErrorOptions {
  retryable?: boolean;
  data?: unknown;
  cause?: unknown;
}

/** Base class of every error Kova throws on purpose. */
export class KovaError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  readonly data: unknown;

  constructor(code: string, message: string, options: KovaErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options.retryable ?? false;
    this.data = options.data;
  }

  toWire(): WireError {
    const wire: WireError = { code: this.code, message: this.message, retryable: this.retryable };
    if (this.data !== undefined) wire.data = this.data;
    return wire;
  }
}

export class ConfigError extends KovaError {
  /** @param key the config key at fault, e.g. `nats.urls[0]` */
  constructor(
    readonly key: string,
    message: string,
    options: KovaErrorOptions = {},
  ) {
    super(ErrorCode.INVALID_CONFIG, `${key}: ${message}`, { ...options, data: { key } });
  }
}

export class InvalidIdError extends KovaError {
  constructor(kind: string, value: unknown, fix = "use 1-128 characters from [A-Za-z0-9_-] (no dots, spaces or wildcards)") {
    super(ErrorCode.INVALID_ID, `invalid ${kind} ${JSON.stringify(value)}: ${fix}`, { data: { kind, value: String(value) } });
  }
}

/** A caller passed a bad argument (a CLI flag, an API parameter); the message names it and the fix. */
export class ArgumentError extends KovaError {
  constructor(
    readonly argument: string,
    message: string,
    options: KovaErrorOptions = {},
  ) {
    super(ErrorCode.INVALID_ARGUMENT, `${argument}: ${message}`, { ...options, data: { argument, ...(options.data as object | undefined) } });
  }
}

export class KovaTimeoutError extends KovaError {
  constructor(what: string, ms: number, options: KovaErrorOptions = {}) {
    super(ErrorCode.TIMEOUT, `${what} timed out after ${ms} ms`, { retryable: true, ...options });
  }
}

/**
 * An error that arrived over the wire from another process. It keeps the sender's code
 * (codes are the contract, whether or not this process loaded the layer that defines it);
 * only a malformed code becomes REMOTE_ERROR, with the original in `remoteCode`.
 */
export class RemoteError extends KovaError {
  readonly remoteCode: string;
  constructor(wire: WireError) {
    super(/^[A-Z][A-Z0-9_]{0,63}$/.test(wire.code) ? wire.code : ErrorCode.REMOTE_ERROR, wire.message, {
      retryable: wire.retryable,
      data: wire.data,
    });
    this.remoteCode = wire.code;
  }
}

export function isKovaError(err: unknown, code?: string): err is KovaError {
  return err instanceof KovaError && (code === undefined || err.code === code);
}

export function isTimeout(err: unknown): err is KovaError {
  return isKovaError(err, ErrorCode.TIMEOUT);
}

/** Serializes any thrown value for the wire; unknown errors become INTERNAL. */
export function toWire(err: unknown): WireError {
  if (err instanceof KovaError) return err.toWire();
  const message = err instanceof Error ? err.message : String(err);
  return { code: ErrorCode.INTERNAL, message, retryable: false };
}

/** Rebuilds an error from its wire form; returns undefined for anything else. */
export function fromWire(value: unknown): RemoteError | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const v = value as Record<string, unknown>;
  if (typeof v.code !== "string" || typeof v.message !== "string") return undefined;
  return new RemoteError({
    code: v.code,
    message: v.message,
    retryable: v.retryable === true,
    data: v.data,
  });
}
