import type { Logger } from "../core/logger.js";
import type { ActorHost, ActorTypeRegistry } from "../actors/index.js";
import type { Wal } from "../wal/index.js";
import type { LeaseTable } from "./lease.js";
import type { AgentRegistry } from "./registry.js";

/** What a node found in its WAL at start and what it did with it (part of `status`). */
export interface NodeRecoveryReport {
  finished: string[];
  abandoned: string[];
  corrupt: number;
  pendingRecords: number;
}

export interface RecoveryDeps {
  readonly nodeId: string;
  readonly wal: Wal;
  readonly host: ActorHost;
  readonly leases: LeaseTable;
  readonly registry: AgentRegistry;
  readonly types: ActorTypeRegistry;
  readonly log: Logger;
}

/**
 * Pending WAL turns left by a crash: finish those of actors whose lease is still this
 * node's (any incarnation: ours before the crash) or free; abandon those of actors now
 * held by another node, which resumed them from the last checkpoint and the redelivered
 * message, so running them here too would run a turn twice.
 */
export async function recoverPendingTurns(d: RecoveryDeps, report: NodeRecoveryReport): Promise<void> {
  const owners = new Set<string>();
  for (const r of d.wal.recovery.pending) if (r.owner) owners.add(r.owner);
  for (const actorId of owners) {
    const lease = d.leases.get(actorId)?.value;
    const record = d.registry.get(actorId);
    const ours = lease === undefined || lease.node === null || lease.node === d.nodeId;
    if (!ours || !record || record.desired === "killed" || !d.types.has(record.type)) {
      await d.host.abandon(actorId);
      report.abandoned.push(actorId);
      d.log.info({ actorId, holder: lease?.node }, "recovery: abandoned a pending turn of an actor that moved");
      continue;
    }
    const won = await d.leases.acquire(actorId, (l) => l.node === d.nodeId || l.node === null);
    if (!won) {
      await d.host.abandon(actorId);
      report.abandoned.push(actorId);
      continue;
    }
    try {
      await d.host.start(actorId, record.type);
      report.finished.push(actorId);
      d.log.info({ actorId }, "recovery: finished a pending turn this node still owns");
    } catch (err) {
      // One actor that cannot recover must not keep the node (and its other actors) down:
      // free the lease so placement retries it, here or elsewhere.
      d.log.error({ err, actorId }, "recovery: the actor did not start; its lease is released for placement to retry");
      await d.host.stop(actorId, { reason: "recovery-failed" }).catch(() => undefined);
      await d.leases.release(actorId, "recovery-failed").catch(() => false);
    }
  }
}
