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
 * The reader of one kind of record whose fields need no conversion: it checks `v` and
 * returns the value as it is (e.g. readLeaseRecord, readNodeRecord).
 * @param describe names the record of a key for the error, e.g. "lease of actor c1"
 */
export function formatReader<T>(describe: (key: string) => string, readable: readonly number[]): (key: string, value: unknown) => T {
  return (key, value) => {
    checkFormatVersion(describe(key), (value as { v?: unknown } | null | undefined)?.v, readable);
    return value as T;
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
