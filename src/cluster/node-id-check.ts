import type { NatsConnection } from "@nats-io/transport-node";
import { BusErrorCode } from "../bus/index.js";
import { ConfigError, ErrorCode, isKovaError, type Logger } from "../core/index.js";
import { controlRequest, nodeSubject, type NodeStatusView } from "./control.js";

/**
 * Refuses a node id that a running process already serves. Two processes under one id
 * would each take the other's leases as their own previous life's and stop each other's
 * actors; the heartbeat conflict is noticed only after both have joined. Asked before the
 * WAL opens and before anything joins: the id's status endpoint answers while its
 * process lives, and a killed one's subscription goes with its connection ("no
 * responders" at once), so a restart after SIGKILL is not delayed. A process that does
 * not answer in time (frozen) is let be: its leases are fenced like any stale node's.
 * @throws ConfigError `node.id` naming the process that holds the id
 */
export async function refuseNodeIdInUse(nc: NatsConnection, cluster: string, nodeId: string, log: Logger, timeoutMs = 2000): Promise<void> {
  let holder: NodeStatusView;
  try {
    holder = await controlRequest<NodeStatusView>(nc, nodeSubject(cluster, nodeId, "status"), {}, timeoutMs);
  } catch (err) {
    if (isKovaError(err, BusErrorCode.NO_RESPONDERS)) return;
    if (isKovaError(err, ErrorCode.TIMEOUT)) {
      log.warn(
        { nodeId },
        "a process holds this node id's status endpoint but does not answer (frozen?); starting anyway, its leases are fenced when it goes stale",
      );
      return;
    }
    // Not allowed to ask (a restricted NATS user), or NATS trouble: the heartbeat check
    // after joining still reports a duplicate.
    log.debug({ err, nodeId }, "node id check not possible");
    return;
  }
  throw new ConfigError(
    "node.id",
    `"${nodeId}" is in use by a running node of cluster ${cluster} (pid ${holder.pid}, up since ${new Date(holder.startedAt).toISOString()}): ` +
      "give every node its own [node] id or KOVA_NODE_ID, or stop that node first",
  );
}
