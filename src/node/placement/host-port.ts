import { ErrorCode, KovaError, sleep } from "../../core/index.js";
import { UnknownAgentError, type Bus } from "../../bus/index.js";
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
    start: async (id, type, record, opts) => {
      const template = record.template === undefined ? undefined : d.templates.resolve(id);
      if (record.template !== undefined && !template) {
        throw new UnknownAgentError(
          id,
          `template ${record.template} of instance ${id} is not registered on node ${d.nodeId}: register the same templates on every node`,
        );
      }
      if (opts.takeover) {
        await stallForTest(id);
        await resetMailbox(d.bus, id);
        // Done: a start tried again (a later step timed out) keeps the consumer this one creates.
        opts.takeover = false;
      }
      await host.start(id, type, template ? { template: template.binding } : {});
      if (record.desired === "paused") await host.signal(id, "pause");
    },
    // A hand-back's stop has no drain timeout: a turn that began after placement saw the
    // actor idle finishes here (placement never cuts a turn to hand an actor back).
    stop: (id, reason, opts) => host.stop(id, opts?.waitForTurn ? { reason } : { reason, drainTimeoutMs: d.config.drainTimeoutMs }),
    hosted: () => host.ids(),
    hosts: (id) => host.hosts(id),
    busy: (id) => host.busy(id),
    turnsEnded: (id) => host.status(id)?.handled ?? 0,
    backlog: (id) => d.bus.mailboxBacklog(id),
    hostedCount: () => host.size,
  };
}

/**
 * Test-only: `KOVA_TEST_STALL_TAKEOVER=<actorId>` makes this process's first takeover start
 * of that actor fail as a JetStream request that got no answer does: after the client's
 * 5 s, with a timeout (test/e2e/cluster-takeover.test.ts). Read once at load: unset,
 * it costs one comparison.
 */
const stallActor = process.env.KOVA_TEST_STALL_TAKEOVER;
let stalled = false;
async function stallForTest(actorId: string): Promise<void> {
  if (stallActor === undefined || stallActor !== actorId || stalled) return;
  stalled = true;
  await sleep(5_000);
  throw new KovaError(ErrorCode.TIMEOUT, `test stall: the consumer reset of ${actorId} got no answer within 5000 ms`);
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
  await bus.deleteMailboxConsumer(actorId);
}
