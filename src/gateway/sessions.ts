import { createHash } from "node:crypto";
import { isValidId, ownedId } from "../core/index.js";
import type { Principal } from "./auth.js";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";

/**
 * Session ids the gateway gives runs. Clients name sessions freely (an OpenAI `user`, the
 * `X-Kova-Session` header, an A2A `contextId`); Kova session ids are subject tokens, and an
 * agent keeps its memory per session id. With API keys, two keys naming the same session
 * must not share it (key B's prompt would hold key A's conversation), so each key's
 * session ids carry its owner scope (core/principals.ts), derived from the key's id.
 */

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
 * The session id a client's session name stands for under its key's scope (none when
 * `auth = "none"`). A name that already carries the caller's own scope (a session id the
 * gateway returned, sent back) is used as is; any other name gets the scope, so one key
 * can never name another key's session. Always a valid id of at most 128 characters.
 * @throws GatewayHttpError 404 for a name that carries another key's scope (as if it did not exist)
 */
export function scopedSessionId(name: string, scope: string | undefined): string {
  const id = sessionIdFor(name);
  if (scope === undefined) return id;
  const owned = ownedId(id, scope);
  if (owned === undefined) throw sessionNotFound(name);
  return owned;
}

/** The 404 of a session that does not exist or is another principal's. */
export function sessionNotFound(name: string): GatewayHttpError {
  return new GatewayHttpError(404, GatewayErrorCode.NOT_FOUND, `no session ${JSON.stringify(name)} of this key`, { data: { sessionId: name } });
}

/**
 * The end user a gateway run is for (`constraints.user`: its fair-share key and its
 * `user_max_tokens` group on the agent's node). A client's own end-user id (the OpenAI
 * `user` field) is scoped by its key like a session name, so a key cannot pass its traffic
 * off as another key's users; without one, the key itself is the user (its scope). None
 * under `auth = "none"` without a client id: the run then counts as the gateway's.
 */
export function endUserOf(principal: Pick<Principal, "sessionScope"> | undefined, clientUser: string | undefined): string | undefined {
  if (clientUser !== undefined && clientUser !== "") return scopedSessionId(clientUser, principal?.sessionScope);
  return principal?.sessionScope?.slice(0, -1);
}
