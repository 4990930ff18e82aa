import { ErrorCode, KovaError } from "./errors.js";

/**
 * Every persisted or shared record (turn records, checkpoints, registry and lease
 * values) carries a format version `v`. A reader takes the versions it knows and refuses
 * any other with an error naming the record and what this build reads, so that in a
 * rolling upgrade an older node never misreads a newer record. A record without `v`
 * predates versioning and is read as version 1.
 */
export class UnsupportedFormatError extends KovaError {
  constructor(
    readonly record: string,
    readonly version: unknown,
    readonly readable: readonly number[],
  ) {
    super(
      ErrorCode.UNSUPPORTED_FORMAT,
      `${record} has format version ${JSON.stringify(version)}, but this build of Kova reads only version ${readable.join(", ")}: ` +
        "it was written by a newer Kova; upgrade this node (or roll the newer ones back)",
      { data: { record, version, readable: [...readable] } },
    );
  }
}

/**
 * One kind of stored record: what a record is called in errors, the format version this
 * build writes and the versions it reads. Every KV store keeps one (bus KvStore), and its
 * `decode` is the record's reader.
 */
export interface RecordFormat<T> {
  /** Names the record of a key for errors, e.g. "lease of actor c1". */
  describe(key: string): string;
  /** The version this build writes (a record may carry an older one it fits, as a message schedule does). */
  readonly version: number;
  /** The versions this build reads. */
  readonly readable: readonly number[];
  /**
   * A stored value as this build reads it: its version checked, then converted.
   * @throws UnsupportedFormatError for a version this build does not read; what `read` throws
   */
  decode(key: string, value: unknown): T;
}

/** @param spec.read converts a value whose version was checked (default: the value as it is) */
export function recordFormat<T>(spec: Omit<RecordFormat<T>, "decode"> & { read?: (key: string, value: unknown) => T }): RecordFormat<T> {
  return {
    ...spec,
    decode: (key, value) => {
      checkFormatVersion(spec.describe(key), (value as { v?: unknown } | null | undefined)?.v, spec.readable);
      return spec.read ? spec.read(key, value) : (value as T);
    },
  };
}

/**
 * @param record names the record for the error, e.g. `checkpoint of actor c1`
 * @returns the version (1 when absent)
 * @throws UnsupportedFormatError for a version this build does not read
 */
export function checkFormatVersion(record: string, v: unknown, readable: readonly number[]): number {
  const version = v === undefined || v === null ? 1 : v;
  if (typeof version !== "number" || !readable.includes(version)) throw new UnsupportedFormatError(record, v, readable);
  return version;
}
