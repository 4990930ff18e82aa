import type { NextFunction, Request, Response } from "express";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";
import { keyPrincipal, type ApiKey, type KeyRing } from "./keys.js";
import { BusErrorCode } from "../bus/index.js";
import { newId, parseInstanceId, ANONYMOUS_PRINCIPAL, ownedAgentId, ownerScopeOf, ownsInstance } from "../core/index.js";

/**
 * Who is calling: a key (docs/security.md, "Principals"). Everything it creates is owned by
 * its `id` (`key:<key id>`, never its name): tasks under it, sessions and template
 * instances under its `scope`.
 */
export interface Principal {
  /** The principal id: `key:<key id>`, or `anonymous` under `auth = "none"`. */
  id: string;
  /** The key's name, for messages and logs only. */
  name: string;
  /** Prefix of the ids of its sessions, instances and end users (core/principals.ts); undefined under `auth = "none"`. */
  sessionScope?: string;
  /** Sees and may use everything: an admin key, or anyone under `auth = "none"` (loopback only). */
  admin: boolean;
  agents?: string[];
  ratePerMinute?: number;
  /** The key's own quotas (the rest: [gateway]'s defaults). */
  quotas?: Pick<ApiKey, "maxInstances" | "maxConcurrentRuns" | "tokensPerMinute">;
}

/** The caller under `auth = "none"` (loopback only): sees everything, as the machine's own user does. */
export const ANONYMOUS: Principal = { id: ANONYMOUS_PRINCIPAL, name: ANONYMOUS_PRINCIPAL, admin: true };

const principals = new WeakMap<ApiKey, Principal>();

/** principalOf, computed once per key (two hashes). */
function cachedPrincipal(key: ApiKey): Principal {
  let p = principals.get(key);
  if (!p) principals.set(key, (p = principalOf(key)));
  return p;
}

/** The principal a key stands for. */
export function principalOf(key: ApiKey): Principal {
  const id = keyPrincipal(key);
  return {
    id,
    name: key.name,
    sessionScope: ownerScopeOf(id),
    admin: key.admin === true,
    ...(key.agents ? { agents: key.agents } : {}),
    ...(key.ratePerMinute ? { ratePerMinute: key.ratePerMinute } : {}),
    quotas: {
      ...(key.maxInstances ? { maxInstances: key.maxInstances } : {}),
      ...(key.maxConcurrentRuns ? { maxConcurrentRuns: key.maxConcurrentRuns } : {}),
      ...(key.tokensPerMinute ? { tokensPerMinute: key.tokensPerMinute } : {}),
    },
  };
}
export const UI_COOKIE = "kova_key";

declare module "express-serve-static-core" {
  interface Request {
    principal?: Principal;
  }
}

/**
 * A token bucket per key: up to `rate` requests at once, refilled at `rate` per minute.
 * Per replica: N replicas behind a balancer admit up to N times the rate (docs/gateway.md).
 */
export class RateLimiter {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  constructor(private readonly defaultRate: number) {}

  /** @returns 0 when admitted, else the seconds until a request would be */
  take(p: Principal, now = performance.now()): number {
    const rate = p.ratePerMinute ?? this.defaultRate;
    let b = this.buckets.get(p.id);
    if (!b) {
      b = { tokens: rate, at: now };
      this.buckets.set(p.id, b);
    }
    b.tokens = Math.min(rate, b.tokens + ((now - b.at) / 60_000) * rate);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil(((1 - b.tokens) / rate) * 60));
  }
}

/** A cookie's value, URI-decoded; one that does not decode (`%E0%A4%A`) is no key: "" (401). */
function cookieValue(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return "";
  }
}

function bearer(req: Request): string | undefined {
  const h = req.header("authorization");
  if (h) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
    return m ? m[1] : "";
  }
  // The web view's EventSource cannot set headers: its page may carry the key in a
  // cookie. Only its GETs take it, so a cross-site form cannot spend the key (CSRF).
  const cookie = req.method === "GET" && req.path.startsWith("/ui") ? req.header("cookie") : undefined;
  if (cookie) {
    for (const part of cookie.split(";")) {
      const [k, ...v] = part.trim().split("=");
      if (k === UI_COOKIE) return cookieValue(v.join("="));
    }
  }
  return undefined;
}

/**
 * Express middleware: every request carries `Authorization: Bearer <key>` (or the web
 * view's cookie) unless the gateway runs with `auth = "none"`. Unknown keys get 401,
 * keys past their rate 429. The key is never logged, echoed or stored.
 */
export function authenticate(opts: { mode: "keys" | "none"; keys: KeyRing; limiter: RateLimiter; staticPaths?: ReadonlySet<string> }) {
  return (req: Request, res: Response, next: NextFunction): void => {
    // The web view's login page and its script and styles are static (no cluster data): the page puts a key in the cookie.
    if (req.method === "GET" && opts.staticPaths?.has(req.path)) {
      next();
      return;
    }
    let principal: Principal;
    if (opts.mode === "none") {
      principal = ANONYMOUS;
    } else {
      const token = bearer(req);
      if (token === undefined && req.method === "GET" && req.path === "/ui" && req.accepts(["json", "html"]) === "html") {
        res.redirect(302, "/ui/login");
        return;
      }
      if (token === undefined) {
        next(
          new GatewayHttpError(
            401,
            GatewayErrorCode.UNAUTHORIZED,
            "this endpoint needs an API key: send Authorization: Bearer <key> (create one with kova gateway keys add <name>)",
          ),
        );
        return;
      }
      const key: ApiKey | undefined = opts.keys.authenticate(token);
      if (!key) {
        next(new GatewayHttpError(401, GatewayErrorCode.UNAUTHORIZED, "the API key is not valid: check it, or create one with kova gateway keys add <name>"));
        return;
      }
      principal = cachedPrincipal(key);
    }
    const wait = opts.limiter.take(principal);
    if (wait > 0) {
      next(
        new GatewayHttpError(429, GatewayErrorCode.RATE_LIMITED, `key ${principal.name} is over its rate limit; retry in ${wait} s`, {
          data: { retryAfterS: wait },
        }),
      );
      return;
    }
    req.principal = principal;
    next();
  };
}

/**
 * Whether the caller may use (and see) this agent: one its `agents` list (every agent
 * without one), and of a template instance only its own (its key in the caller's scope),
 * a listed template's instances included. An admin sees every instance of what it may use.
 */
export function mayUse(p: Principal | undefined, agentId: string): boolean {
  if (p === undefined) return false;
  const inst = parseInstanceId(agentId);
  if (inst !== undefined && !p.admin && (p.sessionScope === undefined || !ownsInstance(agentId, p.sessionScope))) return false;
  return p.agents === undefined || p.agents.includes(agentId) || (inst !== undefined && p.agents.includes(inst.template));
}

/**
 * The 404 of an agent the caller may not use: the same answer as for an agent that does
 * not exist, so that a key learns nothing of what others have.
 */
export function agentNotFound(agentId: string, cluster: string): GatewayHttpError {
  return new GatewayHttpError(
    404,
    BusErrorCode.UNKNOWN_AGENT,
    `no agent ${JSON.stringify(agentId)} in cluster ${cluster}: GET /v1/models or /agents lists the agents`,
    {
      data: { agentId },
    },
  );
}

/**
 * The agent a caller's `agentId` stands for: a template instance it names is its own
 * (`support--user-42` is `support--<its scope>user-42`, core/principals.ts); an admin's
 * names are taken as they are.
 * @throws GatewayHttpError 404 (as for an unknown agent) when the key may not use it, or it names another principal's instance
 */
export function resolveAgent(p: Principal | undefined, agentId: string, cluster: string): string {
  const id = p === undefined || p.admin || p.sessionScope === undefined ? agentId : ownedAgentId(agentId, p.sessionScope);
  if (id === undefined || !mayUse(p, id)) throw agentNotFound(agentId, cluster);
  return id;
}

/**
 * A new run id of the caller's: its scope and a UUID (50 characters), so that a stateless
 * run's session (its run id) is the caller's too and the web view shows it to it.
 */
export function newRunId(p: Principal | undefined): string {
  return `${p?.sessionScope ?? ""}${newId()}`;
}
