import type { NodeConfig } from "./config.js";
import { compactMarkers } from "../cluster/index.js";
import type { NodeParts } from "./node-parts.js";
import type { VirtualActors } from "./virtual-actors.js";

/**
 * The periodic jobs every node runs in the background once it is up: the unknown-agent
 * sweep and the compaction of delete markers. Kept apart from the start order in node.ts;
 * each job is a timer the node stops at teardown.
 */

/** A periodic job; `stop` cancels its next run (one under way finishes and is not followed). */
export interface NodeJob {
  stop(): void;
}

/** What the periodic jobs read and act on. */
export interface NodeJobsDeps extends Pick<NodeParts, "nodeId" | "bus" | "registry" | "leases" | "membership" | "templates" | "log" | "publish"> {
  /** `markerCompactionMs` 0 turns the compaction off. */
  readonly config: Pick<NodeConfig, "unknownAgentAfterMs" | "activationSweepMs" | "markerCompactionMs">;
  readonly virtual: VirtualActors;
}

/**
 * Every node sweeps the A2A stream for messages to agents nobody declared (moves are
 * idempotent, so peers sweeping at once do no harm). The registry mirror answers "is it
 * declared" locally.
 */
export function startUnknownAgentSweep(d: NodeJobsDeps): NodeJob {
  const after = d.config.unknownAgentAfterMs;
  // With templates, the sweep is also the activation backstop: as often as activation_sweep_ms.
  const every = () =>
    Math.max(50, Math.min(60_000, Math.floor(after / 2), d.templates.list().length > 0 ? d.config.activationSweepMs : Number.POSITIVE_INFINITY));
  return repeat(
    every,
    () => d.bus.sweepUnknownAgents({ isKnown: (id) => d.registry.get(id) !== undefined, olderThanMs: after, activate: (id) => d.virtual.claim(id) }),
    (err) => d.log.warn({ err }, "unknown-agent sweep failed; retrying on the next tick"),
  );
}

/**
 * `[cluster] marker_compaction`: every interval, the first live node by id removes the
 * registry's and the leases' delete markers older than one interval (each passivation
 * leaves one per bucket; docs/virtual-actors.md, "Purge markers"). Peers disagreeing for
 * a moment on who is first both compact, which is harmless (compactMarkers is idempotent).
 * @returns undefined when the compaction is off
 */
export function startMarkerCompaction(d: NodeJobsDeps): NodeJob | undefined {
  const every = d.config.markerCompactionMs;
  if (every === 0) return undefined;
  const tick = async () => {
    if (d.membership.liveNodes()[0] !== d.nodeId) return;
    for (const kv of [d.registry.store.kv, d.leases.store.kv]) {
      const r = await compactMarkers(kv, d.bus.jsm, { olderThanMs: every });
      if (r.removed === 0) continue;
      d.log.info(r, "delete markers of passivated instances compacted");
      d.publish("markers_compacted", r.bucket, { ...r, node: d.nodeId });
    }
  };
  return repeat(
    () => every,
    tick,
    (err) => d.log.warn({ err }, "marker compaction failed; retrying at the next interval"),
  );
}

/**
 * Runs `run` after `delayMs()`, and again that long after each run ends, so runs never
 * overlap however long one takes. The timer does not keep the process alive.
 */
function repeat(delayMs: () => number, run: () => Promise<unknown>, onError: (err: unknown) => void): NodeJob {
  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    timer = setTimeout(() => {
      run()
        .catch(onError)
        .finally(() => {
          if (timer !== undefined) schedule();
        });
    }, delayMs());
    timer.unref();
  };
  schedule();
  return {
    stop: () => {
      clearTimeout(timer);
      timer = undefined;
    },
  };
}
