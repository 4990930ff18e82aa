import { ClusterErrorCode, type AgentRegistry } from "../cluster/index.js";
import { ownsInstance, parseInstanceId } from "../core/index.js";
import type { Principal } from "./auth.js";
import type { QuotaLimits } from "./config.js";
import { GatewayHttpError } from "./errors.js";
import type { RunUsage } from "../agents/index.js";

/**
 * Quotas per principal (docs/security.md, "Quotas per principal"): the template instances
 * a key holds, its runs at once and the tokens its runs use per minute. A key past one gets
 * 429 `QUOTA_EXCEEDED` naming it, and nobody else is affected: the cluster's `max_actors`
 * is shared, so one key opening sessions would otherwise take every free place.
 *
 * Instances are counted from the registry (cluster-wide: what every replica sees), plus
 * the activations this replica has under way; runs and tokens per replica, like the rate
 * limit (N replicas admit up to N times as much).
 */

/** How long an activation this replica asked for counts before the registry shows it. */
const PENDING_ACTIVATION_MS = 10_000;

/** A run admitted under its principal's quotas: `end` it with the run's usage (once). */
export interface RunTicket {
  end(usage?: RunUsage): void;
}

const NO_TICKET: RunTicket = { end: () => undefined };

export class PrincipalQuotas {
  private readonly running = new Map<string, number>();
  private readonly tokens = new Map<string, { level: number; at: number }>();
  private readonly activating = new Map<string, Map<string, number>>();

  constructor(
    private readonly defaults: QuotaLimits,
    private readonly registry: Pick<AgentRegistry, "get" | "list">,
  ) {}

  limits(p: Principal): QuotaLimits {
    return {
      maxInstances: p.quotas?.maxInstances ?? this.defaults.maxInstances,
      maxConcurrentRuns: p.quotas?.maxConcurrentRuns ?? this.defaults.maxConcurrentRuns,
      tokensPerMinute: p.quotas?.tokensPerMinute ?? this.defaults.tokensPerMinute,
    };
  }

  /**
   * Admits a run: one more at once, and the key's tokens of the last minute not used up.
   * @throws GatewayHttpError 429 QUOTA_EXCEEDED naming `max_concurrent_runs` or `tokens_per_minute`
   */
  startRun(p: Principal | undefined, now = performance.now()): RunTicket {
    if (p === undefined) return NO_TICKET;
    const limits = this.limits(p);
    const running = this.running.get(p.id) ?? 0;
    if (running >= limits.maxConcurrentRuns)
      throw exceeded(p, "max_concurrent_runs", limits.maxConcurrentRuns, `${running} runs of this key are going: wait for one to end`);
    const bucket = this.bucket(p.id, limits.tokensPerMinute, now);
    if (bucket.level <= 0) {
      const retryAfterS = Math.max(1, Math.ceil(((1 - bucket.level) / limits.tokensPerMinute) * 60));
      throw exceeded(
        p,
        "tokens_per_minute",
        limits.tokensPerMinute,
        `this key's runs used its tokens of the last minute: retry in ${retryAfterS} s`,
        retryAfterS,
      );
    }
    this.running.set(p.id, running + 1);
    let ended = false;
    return {
      end: (usage) => {
        if (ended) return;
        ended = true;
        const n = (this.running.get(p.id) ?? 1) - 1;
        if (n <= 0) this.running.delete(p.id);
        else this.running.set(p.id, n);
        if (usage) this.bucket(p.id, limits.tokensPerMinute, performance.now()).level -= usage.inputTokens + usage.outputTokens;
      },
    };
  }

  /**
   * Admits the activation of `agentId` when it is a template instance the registry does not
   * list yet: the key's instances (registered, and being activated by this replica) must
   * stay within `max_instances`. An admin's or an unscoped caller's (`auth = "none"`)
   * unscoped instances are not counted.
   * @throws GatewayHttpError 429 QUOTA_EXCEEDED naming `max_instances`
   */
  admitInstance(p: Principal | undefined, agentId: string, now = Date.now()): void {
    const scope = p?.sessionScope;
    if (p === undefined || scope === undefined || !ownsInstance(agentId, scope)) return;
    const known = this.registry.get(agentId);
    if (known && known.desired !== "killed") return;
    const pending = this.activating.get(p.id) ?? new Map<string, number>();
    for (const [id, until] of pending) if (until < now || this.registry.get(id) !== undefined) pending.delete(id);
    let held = pending.size;
    for (const r of this.registry.list()) if (r.desired !== "killed" && parseInstanceId(r.id) !== undefined && ownsInstance(r.id, scope)) held++;
    const limits = this.limits(p);
    if (!pending.has(agentId) && held >= limits.maxInstances)
      throw exceeded(
        p,
        "max_instances",
        limits.maxInstances,
        `this key holds ${held} template instances: end sessions it no longer needs (idle instances are passivated)`,
      );
    pending.set(agentId, now + PENDING_ACTIVATION_MS);
    this.activating.set(p.id, pending);
  }

  private bucket(id: string, perMinute: number, now: number): { level: number; at: number } {
    let b = this.tokens.get(id);
    if (!b) {
      b = { level: perMinute, at: now };
      this.tokens.set(id, b);
    }
    b.level = Math.min(perMinute, b.level + ((now - b.at) / 60_000) * perMinute);
    b.at = now;
    return b;
  }
}

function exceeded(p: Principal, quota: string, limit: number, why: string, retryAfterS = 1): GatewayHttpError {
  return new GatewayHttpError(429, ClusterErrorCode.QUOTA_EXCEEDED, `key ${p.name} is at its quota ${quota} (${limit}): ${why}`, {
    data: { quota, limit, retryAfterS },
  });
}
