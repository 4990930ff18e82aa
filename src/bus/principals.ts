import type { MsgHdrs } from "@nats-io/transport-node";
import { ErrorCode, KovaError, isValidId, parseInstanceId, ownedAgentId, ownedId, ownerScopeOf, ownsInstance } from "../core/index.js";
import type { A2AEnvelope } from "./envelope.js";
import { InvalidEnvelopeError, UnknownAgentError } from "./errors.js";

/**
 * Bus clients as principals (docs/security.md, "Bus principals"). A node learns who sent a
 * message from nats-server, never from the envelope: a message that crosses a service
 * import into the nodes' account carries the `Nats-Request-Info` header, which the server
 * writes with the sender's account and (with `share: true` on the import) user. The server
 * sets it on every import crossing and puts its own value last, after whatever the sender
 * wrote under that name (checked on nats-server 2.9.10: a client's own `Nats-Request-Info`
 * stays in front of the server's), so the last value is the one that counts.
 *
 * A message without the header was published inside the nodes' account (a node, or any
 * user of a deployment without accounts): trusted, as nodes trust each other. A message
 * from an account in `trustedAccounts` (the operators' and gateways', which act for
 * others: a gateway scopes its keys' sessions itself) is trusted too. Any other account's
 * user is a principal `nats:<account>:<user>` whose messages the node holds to what it
 * owns: instances and sessions in its owner scope (core/principals.ts), replies in its
 * own inbox (`<clientInboxPrefix>.<user>`).
 */

export const REQUEST_INFO_HEADER = "Nats-Request-Info";

export interface SenderTrust {
  /** Accounts whose users act for others (operators, gateways). Default: none. */
  trustedAccounts?: readonly string[];
  /** Reply inbox prefix of tenant users: user U replies under `<prefix>.U.>`. Default `_INBOX_client`. */
  clientInboxPrefix?: string;
}

export const DEFAULT_CLIENT_INBOX_PREFIX = "_INBOX_client";

/** A bus client the node holds to what it owns. */
export interface BusPrincipal {
  /** `nats:<account>:<user>` */
  id: string;
  account: string;
  user: string;
  /** Its owner scope: the prefix of its sessions', instances' and runs' ids. */
  scope: string;
  /** Its reply inbox prefix: replies only go under `<inbox>.`. */
  inbox: string;
}

/** A message from a tenant account whose user the server did not name (its service import lacks `share: true`). */
export class UnnamedSenderError extends KovaError {
  constructor(account: string) {
    super(
      ErrorCode.INVALID_ARGUMENT,
      `a message from NATS account ${account} names no user (Nats-Request-Info without "user"): set share: true on that account's service imports of Kova's subjects, or list the account in [nats] trusted_accounts if its users act for others`,
      { data: { account } },
    );
  }
}

const CACHE_MAX = 512;

/** Who sent a message, from its `Nats-Request-Info` (see above). One per bus connection. */
export class SenderIdentity {
  private readonly trusted: ReadonlySet<string>;
  private readonly inboxPrefix: string;
  /** By the header's raw value (a connection sends the same one until its RTT changes): parsed and hashed once. */
  private readonly cache = new Map<string, BusPrincipal | null>();

  constructor(trust: SenderTrust = {}) {
    this.trusted = new Set(trust.trustedAccounts ?? []);
    this.inboxPrefix = trust.clientInboxPrefix ?? DEFAULT_CLIENT_INBOX_PREFIX;
  }

  /**
   * @returns undefined for a trusted sender, else the principal that sent the message
   * @throws UnnamedSenderError for a tenant account's message without a user; InvalidEnvelopeError for a header that is not the server's JSON
   */
  of(headers: MsgHdrs | undefined): BusPrincipal | undefined {
    if (!headers?.has(REQUEST_INFO_HEADER)) return undefined;
    const values = headers.values(REQUEST_INFO_HEADER);
    const raw = values[values.length - 1]!;
    const cached = this.cache.get(raw);
    if (cached !== undefined) return cached ?? undefined;
    const principal = this.parse(raw);
    if (this.cache.size >= CACHE_MAX) this.cache.clear();
    this.cache.set(raw, principal ?? null);
    return principal;
  }

  private parse(raw: string): BusPrincipal | undefined {
    let info: { acc?: unknown; user?: unknown };
    try {
      info = JSON.parse(raw) as { acc?: unknown; user?: unknown };
    } catch {
      throw new InvalidEnvelopeError(REQUEST_INFO_HEADER, "is not the JSON nats-server writes");
    }
    const account = typeof info?.acc === "string" ? info.acc : "";
    if (this.trusted.has(account)) return undefined;
    if (typeof info.user !== "string" || info.user === "") throw new UnnamedSenderError(account || "(none)");
    const id = `nats:${account}:${info.user}`;
    return { id, account, user: info.user, scope: ownerScopeOf(id), inbox: `${this.inboxPrefix}.${info.user}` };
  }
}

/** Payload fields that name what a run belongs to: a tenant's are made its own. */
const OWNED_FIELDS = ["sessionId", "runId", "parentRunId"] as const;

/**
 * A tenant's message as the node takes it: addressed to no instance but its own, replying
 * to no inbox but its own, and with every id in its payload that names a session, a run, a
 * budget group or an end user made its own (the caller's names get its scope; one that
 * carries another principal's scope is refused as not found). A message without a run id
 * gets one of its own (from the message id, so a resend gets the same).
 * Checking is a few string comparisons: no lookup.
 * @throws InvalidEnvelopeError for a `replyTo` outside its inbox; NotOwnedError (UNKNOWN_AGENT)
 *   for another principal's instance or id, as for one that does not exist
 */
export function admitFromTenant(env: A2AEnvelope, p: BusPrincipal): A2AEnvelope {
  if (env.replyTo !== undefined && !env.replyTo.startsWith(`${p.inbox}.`)) {
    throw new InvalidEnvelopeError("replyTo", `may name only the sender's own inbox (${p.inbox}.>), not ${JSON.stringify(env.replyTo.slice(0, 80))}`);
  }
  requireOwnInstance(env.to, p);
  const payload = env.payload;
  if (payload === null || typeof payload !== "object" || Array.isArray(payload)) return env;
  const src = payload as Record<string, unknown>;
  const out: Record<string, unknown> = { ...src };
  for (const field of OWNED_FIELDS) if (isValidId(src[field])) out[field] = owned(src[field] as string, p);
  out.runId ??= owned(env.id, p);
  const c = src.constraints;
  if (c !== null && typeof c === "object" && !Array.isArray(c)) {
    const constraints: Record<string, unknown> = { ...(c as Record<string, unknown>) };
    for (const field of ["user", "budget_group"] as const) if (isValidId(constraints[field])) constraints[field] = owned(constraints[field] as string, p);
    if (constraints.user === undefined) constraints.user = p.scope.slice(0, -1);
    out.constraints = constraints;
  } else if (c === undefined) {
    out.constraints = { user: p.scope.slice(0, -1) };
  }
  return { ...env, payload: out };
}

/**
 * The agent a tenant's request names (an activation, a fast-path request): its own
 * instance for an instance id (`support--user-42` is its `support--<scope>user-42`).
 * @throws NotOwnedError (UNKNOWN_AGENT) for another principal's instance, as for one that does not exist
 */
export function tenantAgentId(agentId: string, p: BusPrincipal): string {
  const id = ownedAgentId(agentId, p.scope);
  if (id === undefined) throw notOwned(agentId);
  return id;
}

/**
 * A tenant reaches a template instance only if it is its own (its fast path included);
 * declared agents are everyone's.
 * @throws NotOwnedError (UNKNOWN_AGENT) for another principal's instance
 */
export function requireOwnInstance(agentId: string, p: BusPrincipal): void {
  if (parseInstanceId(agentId) !== undefined && !ownsInstance(agentId, p.scope)) throw notOwned(agentId);
}

function owned(name: string, p: BusPrincipal): string {
  const id = ownedId(name, p.scope);
  if (id === undefined) throw notOwned(name);
  return id;
}

/**
 * What a tenant gets for another principal's instance, session or run: UNKNOWN_AGENT, as
 * for one that does not exist (the message says the same whether it exists or not).
 */
export class NotOwnedError extends UnknownAgentError {
  constructor(id: string) {
    super(
      id,
      `no ${parseInstanceId(id) ? "agent" : "session or run"} ${id} of this sender`,
      "name your own (a name without another principal's o<hex>_ prefix becomes yours; activate answers an instance's id)",
    );
  }
}

function notOwned(id: string): NotOwnedError {
  return new NotOwnedError(id);
}
