import type { NextFunction, Request, Response } from "express";
import { GatewayErrorCode, GatewayHttpError } from "./errors.js";
import type { ApiKey, KeyRing } from "./keys.js";
import { parseInstanceId } from "../core/ids.js";
import { sessionScopeOf } from "./sessions.js";

/** Who is calling: the key's name and what it may use. */
export interface Principal {
  /** The key's name (`anonymous` under `auth = "none"`); tasks are scoped by it. */
  name: string;
  agents?: string[];
  ratePerMinute?: number;
  /** Prefix of the session ids of this key's sessions (sessions.ts); undefined under `auth = "none"`. */
  sessionScope?: string;
}

const ANONYMOUS: Principal = { name: "anonymous" };
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
    let b = this.buckets.get(p.name);
    if (!b) {
      b = { tokens: rate, at: now };
      this.buckets.set(p.name, b);
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
export function authenticate(opts: { mode: "keys" | "none"; keys: KeyRing; limiter: RateLimiter }) {
  return (req: Request, res: Response, next: NextFunction): void => {
    // The web view's login page is static (no cluster data): it puts a key in the cookie.
    if (req.method === "GET" && req.path === "/ui/login") {
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
      principal = {
        name: key.name,
        sessionScope: sessionScopeOf(key.name),
        ...(key.agents ? { agents: key.agents } : {}),
        ...(key.ratePerMinute ? { ratePerMinute: key.ratePerMinute } : {}),
      };
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

/** Whether the caller may use this agent: a key listing a template's name may use all its instances. */
export function mayUse(p: Principal | undefined, agentId: string): boolean {
  if (p === undefined) return false;
  if (p.agents === undefined || p.agents.includes(agentId)) return true;
  const inst = parseInstanceId(agentId);
  return inst !== undefined && p.agents.includes(inst.template);
}

/** @throws GatewayHttpError 403 when the key may not use the agent */
export function requireAgent(p: Principal | undefined, agentId: string): void {
  if (!mayUse(p, agentId)) {
    throw new GatewayHttpError(403, GatewayErrorCode.FORBIDDEN, `key ${p?.name ?? "?"} may not use agent ${agentId}: add it to the key's agents`, {
      data: { agentId },
    });
  }
}
