import { createHash } from "node:crypto";
import { INSTANCE_SEPARATOR, isValidId, parseInstanceId } from "./ids.js";

/**
 * Principals: who owns what (docs/security.md, "Principals"). A principal is a gateway API
 * key (`key:<key id>`), a NATS user of a tenant account (`nats:<account>:<user>`), or
 * `anonymous` (a gateway with `auth = "none"`, which only listens on loopback).
 *
 * Ownership is carried in ids, so that checking it is a string comparison, never a lookup:
 * every principal has an *owner scope* (`o` + 12 hex digits of its id's SHA-256 + `_`),
 * and the session ids, template instance keys, run ids and end-user ids it creates start
 * with it. A session `support` of key A is `o1f3…_support`; its instance of template
 * `helpdesk` is `helpdesk--o1f3…_support`. A principal names its things freely (they get
 * its scope); a name that carries another principal's scope is refused as not found.
 */

export const ANONYMOUS_PRINCIPAL = "anonymous";

/** Hex digits of the principal id's SHA-256 in its scope: 48 bits, no collision for any real number of principals. */
const SCOPE_HEX = 12;
const SCOPED = /^o[0-9a-f]{12}_/;

/** The owner scope of a principal id: `o` + 12 hex digits + `_` (hex: never the `--` of an instance id). */
export function ownerScopeOf(principalId: string): string {
  return `o${createHash("sha256").update(principalId).digest("hex").slice(0, SCOPE_HEX)}_`;
}

/** Whether `id` carries an owner scope (anyone's). */
export function isScoped(id: string): boolean {
  return SCOPED.test(id);
}

function digest(text: string): string {
  return createHash("sha256").update(text).digest("base64url").slice(0, 32);
}

/**
 * The id that `name` (a valid id token) stands for under `scope`: a name already in the
 * scope as is, any other with the scope in front (a digest of it when that would pass 128
 * characters).
 * @returns undefined when `name` carries another principal's scope: that is not the caller's to name
 */
export function ownedId(name: string, scope: string): string | undefined {
  if (name.startsWith(scope)) return name;
  if (SCOPED.test(name)) return undefined;
  const scoped = `${scope}${name}`;
  return isValidId(scoped) ? scoped : `${scope}h${digest(name)}`;
}

/**
 * Templates whose instances only trusted parties address (nodes, operators, gateways acting
 * for an admin key): an experiment `eval--<id>` and its runners `eval-subject--…` run what a
 * stored spec says, with the powers of the cluster, so no principal may message, ask or
 * activate one even when its id carries the principal's scope (an experiment started for
 * it). Registered by the layer that defines them (eval), as message types are.
 */
const RESERVED_TEMPLATES = new Set<string>();

export function reserveTemplates(...templates: string[]): void {
  for (const t of templates) RESERVED_TEMPLATES.add(t);
}

/**
 * The template instance `agentId` stands for under `scope` (its key owned as ownedId
 * says); any other id as is.
 * @returns undefined for an instance whose key carries another principal's scope, or of a
 *   template reserved for trusted parties (reserveTemplates)
 */
export function ownedAgentId(agentId: string, scope: string): string | undefined {
  const inst = parseInstanceId(agentId);
  if (!inst) return agentId;
  if (RESERVED_TEMPLATES.has(inst.template)) return undefined;
  const key = ownedId(inst.key, scope);
  if (key === undefined) return undefined;
  const id = `${inst.template}${INSTANCE_SEPARATOR}${key}`;
  return isValidId(id) ? id : `${inst.template}${INSTANCE_SEPARATOR}${scope}h${digest(inst.key)}`;
}

/**
 * Whether a principal of `scope` owns, and may address, the template instance `agentId`
 * (false for any other id, and for an instance of a template reserved for trusted parties).
 */
export function ownsInstance(agentId: string, scope: string): boolean {
  const inst = parseInstanceId(agentId);
  return inst?.key.startsWith(scope) === true && !RESERVED_TEMPLATES.has(inst.template);
}
