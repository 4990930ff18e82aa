import { isConsumerNotFound, UnknownAgentError, type Bus } from "../../bus/index.js";
import type { NodeConfig } from "../config.js";
import type { NodeParts } from "../node-parts.js";
import type { HostPort } from "./controller.js";

/** What the port starts actors with; `config.drainTimeoutMs` is how long a stopping actor may take to finish its turn. */
export interface HostPortDeps extends Pick<NodeParts, "nodeId" | "bus" | "host" | "templates"> {
  readonly config: Pick<NodeConfig, "drainTimeoutMs">;
}

/**
 * How placement starts and stops actors on this node: the ActorHost adapted to
 * placement's HostPort, with what a takeover needs first (a fresh consumer) and what an
 * instance of a template needs (its template's binding). Apart from node.ts because it
 * is the one place where placement's records turn into hosted actors.
 */
export function placementHostPort(d: HostPortDeps): HostPort {
  const { host } = d;
  return {
    start: async (id, type, record, { takeover }) => {
      const template = record.template === undefined ? undefined : d.templates.resolve(id);
      if (record.template !== undefined && !template) {
        throw new UnknownAgentError(
          id,
          `template ${record.template} of instance ${id} is not registered on node ${d.nodeId}: register the same templates on every node`,
        );
      }
      if (takeover) await resetMailbox(d.bus, id);
      await host.start(id, type, template ? { template: template.binding } : {});
      if (record.desired === "paused") await host.signal(id, "pause");
    },
    stop: (id, reason) => host.stop(id, { reason, drainTimeoutMs: d.config.drainTimeoutMs }),
    hosted: () => host.ids(),
    hosts: (id) => host.hosts(id),
    hostedCount: () => host.size,
  };
}

/**
 * Deletes an actor's durable consumer before hosting an actor that was hosted before.
 * The delivery a killed host was working on stays ack-pending on the consumer, and with
 * `max_ack_pending: 1` the server sends nothing more until `ack_wait` expires: the same
 * node restarted on its data dir (recovery-policy.ts) needs the reset as much as a peer.
 * A SIGKILLed node's pull requests vanish with its connection, but a frozen one
 * (SIGSTOP, a long GC, a VM pause) keeps them parked on the server, and a gracefully
 * stopped mailbox may leave its last pull request there too; the server would hand the
 * next message to that dead inbox and redeliver it only after ack_wait. The stream is
 * a work queue, so unacknowledged messages stay in it and the recreated consumer
 * delivers them from the first one at once; the old host's late acks then address a
 * consumer incarnation that no longer holds those deliveries (and are fenced anyway).
 */
export async function resetMailbox(bus: Bus, actorId: string): Promise<void> {
  try {
    await bus.jsm.consumers.delete(bus.subjects.streams.a2a, bus.subjects.consumer(actorId));
  } catch (err) {
    if (!isConsumerNotFound(err)) throw err;
  }
}
