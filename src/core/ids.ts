import { createHash, randomUUID } from "node:crypto";
import { ArgumentError, InvalidIdError } from "./errors.js";

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

/**
 * The two shapes of derived id that are stored today (in turn records, streams and event
 * histories), each kept byte for byte:
 * - `"uuid"`: UUID-shaped hex (version nibble 8, "custom"), the envelope ids of a turn's
 *   sends and replies (actors);
 * - `{ prefix }`: `<prefix>-` and 22 base64url characters, the run, message and event ids
 *   a delegator derives (agents as tools, swarms).
 */
export type DerivedIdForm = "uuid" | { readonly prefix: string };

/**
 * A deterministic id: SHA-256 of `parts` joined by NUL, in the shape `form` names. What is
 * sent again after a crash or a takeover is named by what was already recorded (the actor,
 * the message it handles, the step; a run id and a subtask's index), so the repeat carries
 * the same id and JetStream's `Nats-Msg-Id` window or the receiver's processed ids drop it.
 * @throws ArgumentError when a prefix is not an id token of at most 64 characters
 */
export function derivedId(form: DerivedIdForm, ...parts: string[]): string {
  const digest = createHash("sha256").update(parts.join("\u0000"));
  if (form === "uuid") {
    const h = digest.digest("hex");
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-8${h.slice(13, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
  }
  if (!isValidId(form.prefix) || form.prefix.length > 64) throw new ArgumentError("prefix", "must be an id token of at most 64 characters");
  return `${form.prefix}-${digest.digest("base64url").slice(0, 22)}`;
}

/**
 * Virtual actors: an instance of template `support` for key `user-42` has the id
 * `support--user-42`. It stays one subject token (an ordinary id), so its inbox, rpc
 * subject, consumer, lease and checkpoint are those of any actor. The first `--` splits
 * the id, so a template name never contains `--` and does not end in `-`; the key may.
 */
export const INSTANCE_SEPARATOR = "--";
/** A template name: 1-64 id characters, no `--`, not ending in `-` (see INSTANCE_SEPARATOR). */
export const TEMPLATE_NAME_MAX = 64;

export function isValidTemplateName(value: unknown): value is string {
  return (
    typeof value === "string" && value.length <= TEMPLATE_NAME_MAX && ID_PATTERN.test(value) && !value.includes(INSTANCE_SEPARATOR) && !value.endsWith("-")
  );
}

/**
 * The id of `template`'s instance for `key`.
 * @throws InvalidIdError naming the template or the key (and how long the key may be)
 */
export function instanceId(template: string, key: string): string {
  if (!isValidTemplateName(template)) {
    throw new InvalidIdError("template name", template, `use 1-${TEMPLATE_NAME_MAX} characters from [A-Za-z0-9_-], without "--" and not ending in "-"`);
  }
  const max = 128 - template.length - INSTANCE_SEPARATOR.length;
  if (typeof key !== "string" || key.length > max || !ID_PATTERN.test(key)) {
    throw new InvalidIdError(`key of template ${template}`, key, `use 1-${max} characters from [A-Za-z0-9_-] (the whole id ${template}--<key> is at most 128)`);
  }
  return `${template}${INSTANCE_SEPARATOR}${key}`;
}

/** Splits an instance id into template and key; undefined when `id` has no instance form. */
export function parseInstanceId(id: string): { template: string; key: string } | undefined {
  const at = id.indexOf(INSTANCE_SEPARATOR);
  if (at <= 0 || at + INSTANCE_SEPARATOR.length >= id.length || !isValidId(id)) return undefined;
  const template = id.slice(0, at);
  if (!isValidTemplateName(template)) return undefined;
  return { template, key: id.slice(at + INSTANCE_SEPARATOR.length) };
}
