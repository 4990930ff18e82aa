import type { Logger } from "../core/index.js";
import type { ActorHost, ActorTypeRegistry } from "../actors/index.js";
import type { Wal } from "../wal/index.js";
import type { LeaseTable, AgentRecord, AgentRegistry } from "../cluster/index.js";
import type { HostPort } from "./placement/controller.js";

/** What a node found in its WAL at start and what it did with it (part of `status`). */
export interface NodeRecoveryReport {
  /** Actors whose pending turns were finished here. */
  finished: string[];
  /** Actors whose pending turns are being finished now (each on its own actor). */
  recovering: string[];
  /** Actors whose pending turns were dropped: the actor had moved to another node. */
  abandoned: string[];
  corrupt: number;
  pendingRecords: number;
}

export interface RecoveryDeps {
  readonly nodeId: string;
  readonly wal: Wal;
  readonly host: ActorHost;
  /**
   * How placement starts actors (host-port.ts): a recovered actor is started the same way,
   * as a takeover, so that its mailbox consumer is reset first. The delivery this node's
   * previous life held when it died is ack-pending on the consumer (`max_ack_pending` 1),
   * and without the reset the actor's next message would wait out `ack_wait`.
   */
  readonly port: Pick<HostPort, "start">;
  readonly leases: LeaseTable;
  readonly registry: AgentRegistry;
  readonly types: ActorTypeRegistry;
  readonly log: Logger;
}

/**
 * Pending WAL turns left by a crash: finish those of actors whose lease is still this
 * node's (any incarnation: ours before the crash) or free; abandon those of actors now
 * held by another node. That node resumes the turn when the message is redelivered to it
 * (or has finished it already): from the actor's last checkpoint plus the turn's entries
 * in the step journal on NATS, which this node appended with each step's WAL write before it
 * died, so the results recorded here are reused there and a non-idempotent step that was
 * started without a result is reported as outcome unknown (docs/actors.md, "Step journal
 * on NATS"). With `[journal] nats = false` there is no journal, and the new host runs the
 * turn again from the checkpoint. Either way the turn is that node's: finishing it here
 * too would run it twice.
 *
 * The decisions (one lease compare-and-set per actor) are made before this resolves;
 * the turns themselves are not waited for. Each recovered actor replays its own turns
 * (one at a time) while the node goes on to place and serve its other actors, so a turn
 * that takes a minute, or hangs, holds only its own actor: the host counts it as hosted
 * from the start, so placement leaves it alone until it opens its mailbox.
 * @returns a promise that settles when every recovered actor has started (or failed to)
 */
export async function recoverPendingTurns(d: RecoveryDeps, report: NodeRecoveryReport): Promise<{ settled: Promise<void> }> {
  const owners = new Set<string>();
  for (const r of d.wal.recovery.pending) if (r.owner) owners.add(r.owner);
  const starts: Array<Promise<void>> = [];
  for (const actorId of owners) {
    const lease = d.leases.get(actorId)?.value;
    const record = d.registry.get(actorId);
    const ours = lease === undefined || lease.node === null || lease.node === d.nodeId;
    const won =
      ours &&
      record !== undefined &&
      record.desired !== "killed" &&
      d.types.has(record.type) &&
      (await d.leases.acquire(actorId, (l) => l.node === d.nodeId || l.node === null));
    if (!won || !record) {
      await d.host.abandon(actorId);
      report.abandoned.push(actorId);
      d.log.info({ actorId, holder: lease?.node }, "recovery: abandoned a pending turn of an actor that moved");
      continue;
    }
    report.recovering.push(actorId);
    starts.push(finish(d, report, record));
  }
  return { settled: Promise.all(starts).then(() => undefined) };
}

async function finish(d: RecoveryDeps, report: NodeRecoveryReport, record: AgentRecord): Promise<void> {
  const actorId = record.id;
  try {
    await d.port.start(actorId, record.type, record, { takeover: true });
    report.finished.push(actorId);
    d.log.info({ actorId }, "recovery: finished a pending turn this node still owns");
  } catch (err) {
    // One actor that cannot recover must not keep the node (and its other actors) down:
    // free the lease so placement retries it, here or elsewhere.
    d.log.error({ err, actorId }, "recovery: the actor did not start; its lease is released for placement to retry");
    await d.host.stop(actorId, { reason: "recovery-failed" }).catch(() => undefined);
    await d.leases.release(actorId, "recovery-failed").catch(() => false);
  } finally {
    report.recovering.splice(report.recovering.indexOf(actorId), 1);
  }
}
