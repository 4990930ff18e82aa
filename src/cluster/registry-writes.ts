import type { Logger } from "../core/index.js";
import type { AgentRecord, AgentRegistry } from "./registry.js";

/**
 * The node's writes to the agents registry, queued per actor: state changes, placement
 * changes and control wishes of one actor arrive from several places at once, and applied
 * in order a later state never loses to an earlier one. A failed write is logged and the
 * queue goes on. A node leaving waits for `settled()` so its last states reach the bucket.
 */
export class RegistryWrites {
  private readonly queued = new Map<string, Promise<unknown>>();

  constructor(
    private readonly registry: AgentRegistry,
    /** The node's own logger (`component: "node"`). */
    private readonly log: Logger,
  ) {}

  /** Applies `change` to the actor's record after the writes queued for it (undefined from `change`: no write). */
  write(actorId: string, change: (cur: AgentRecord) => AgentRecord | undefined): Promise<unknown> {
    const prev = this.queued.get(actorId) ?? Promise.resolve();
    const next = prev
      .then(() => this.registry.update(actorId, change))
      .catch((err: unknown) => this.log.warn({ err, actorId }, "registry update failed"))
      .finally(() => {
        if (this.queued.get(actorId) === next) this.queued.delete(actorId);
      });
    this.queued.set(actorId, next);
    return next;
  }

  /** Removes a registry entry after the writes queued for it (a passivation). */
  remove(actorId: string, mayRemove: (cur: AgentRecord) => boolean): Promise<boolean> {
    let removed = false;
    return this.write(actorId, () => undefined)
      .then(async () => {
        removed = await this.registry.remove(actorId, mayRemove);
      })
      .then(() => removed);
  }

  /** Resolves once every write queued so far is done. */
  settled(): Promise<unknown> {
    return Promise.all([...this.queued.values()]);
  }
}
