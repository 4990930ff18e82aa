import { randomUUID } from "node:crypto";
import { InvalidIdError } from "./errors.js";

/**
 * Ids become NATS subject tokens and KV keys, so they are restricted to one safe
 * alphabet: a dot would split a subject, `*` and `>` are wildcards.
 */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,128}$/;

export function isValidId(value: unknown): value is string {
  return typeof value === "string" && ID_PATTERN.test(value);
}

/** @throws InvalidIdError when `value` is not a valid token */
export function assertId(kind: string, value: unknown): string {
  if (!isValidId(value)) throw new InvalidIdError(kind, value);
  return value;
}

/** A new random id (UUID v4, which is inside the id alphabet). */
export function newId(): string {
  return randomUUID();
}
