import { createHash } from "node:crypto";
import { isValidId } from "../core/ids.js";
import type { Principal } from "./auth.js";

/**
 * Session ids the gateway gives runs. Clients name sessions freely (an OpenAI `user`, the
 * `X-Kova-Session` header, an A2A `contextId`); Kova session ids are subject tokens, and an
 * agent keeps its memory per session id. With API keys, two keys naming the same session
 * must not share it (key B's prompt would hold key A's conversation), so each key's
 * session ids carry a prefix derived from the key's name.
 */

/** Hex characters of the key name's SHA-256 in a key's prefix: 48 bits, collision-free for any real number of keys. */
const SCOPE_HASH_CHARS = 12;

function digest(text: string): string {
  return createHash("sha256").update(text).digest("base64url").slice(0, 32);
}

/**
 * A2A context ids are free-form; Kova session ids are subject tokens. An id that is one
 * already is used as is; any other maps to a stable token derived from it.
 */
export function sessionIdFor(contextId: string): string {
  return isValidId(contextId) ? contextId : `ctx_${digest(contextId)}`;
}

/**
 * The prefix of a key's session ids: `k` + hex of its name's SHA-256 + `_`. Hex, so the
 * prefix never holds the `--` of a template instance id (`support--<session>`).
 */
export function sessionScopeOf(keyName: string): string {
  return `k${createHash("sha256").update(keyName).digest("hex").slice(0, SCOPE_HASH_CHARS)}_`;
}

/**
 * The session id a client's session name stands for under its key's scope (none when
 * `auth = "none"`). A name that already carries the caller's own prefix (a session id the
 * gateway returned, sent back) is used as is; any other name gets the prefix, so one key
 * can never name another key's session. Always a valid id of at most 128 characters.
 */
export function scopedSessionId(name: string, scope: string | undefined): string {
  const id = sessionIdFor(name);
  if (scope === undefined || id.startsWith(scope)) return id;
  const scoped = `${scope}${id}`;
  return isValidId(scoped) ? scoped : `${scope}ctx_${digest(name)}`;
}

/**
 * The end user a gateway run is for (`constraints.user`: its fair-share key and its
 * `user_max_tokens` group on the agent's node). A client's own end-user id (the OpenAI
 * `user` field) is scoped by its key like a session name, so a key cannot pass its traffic
 * off as another key's users; without one, the key itself is the user. None under
 * `auth = "none"` without a client id: the run then counts as the gateway's.
 */
export function endUserOf(principal: Pick<Principal, "name" | "sessionScope"> | undefined, clientUser: string | undefined): string | undefined {
  if (clientUser !== undefined && clientUser !== "") return scopedSessionId(clientUser, principal?.sessionScope);
  if (principal?.sessionScope === undefined) return undefined;
  return isValidId(principal.name) ? principal.name : `${principal.sessionScope}key`;
}
