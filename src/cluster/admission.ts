import { backoffMs, sleep, KovaError } from "../core/index.js";
import { ClusterErrorCode, FenceConflictError } from "./errors.js";
import type { AgentRegistry } from "./registry.js";

/**
 * Below this many free places per live node, an admission writes its registry entry only
 * if the agents bucket is still exactly as this node's mirror last saw it (see
 * ActorAdmission). A node has at most ADMISSIONS_IN_FLIGHT unfenced entries in flight,
 * and a peer's watch delivers one within about one more KV round trip, in which the node
 * lands at most that many more: so a peer misses at most twice ADMISSIONS_IN_FLIGHT of
 * one node's admissions at a time, and that is what this margin covers.
 */
export const FENCE_MARGIN_PER_NODE = 16;

/**
 * Unfenced admissions one node runs at once (each one KV round trip). Half the fence
 * margin, see FENCE_MARGIN_PER_NODE. When every admission waited for the one before,
 * 5,000 activations on one node took two to three times as long (docs/benchmarks.md,
 * "Model-call throughput per policy").
 */
export const ADMISSIONS_IN_FLIGHT = FENCE_MARGIN_PER_NODE / 2;

/** Fenced attempts before an admission gives up (the bucket kept changing under it). */
const FENCED_ATTEMPTS = 40;

export interface AdmissionOptions {
  registry: Pick<AgentRegistry, "get" | "liveCount" | "watchedRevision">;
  /** `[cluster] max_actors`. */
  maxActors: number;
  /** Live nodes of the cluster (this one included), which may admit at the same time. */
  liveNodes(): number;
}

/** What this node's admissions are doing right now (test/integration/node-admission.test.ts reads it). */
export interface AdmissionView {
  /** Admissions whose registry entry is being written. */
  running: number;
  /** Admissions waiting for their turn (a free place among ADMISSIONS_IN_FLIGHT, the end of a fenced one). */
  waiting: number;
  /** Whether the one running admission is fenced (then nothing else runs). */
  fenced: boolean;
}

/** One admission waiting in the queue; `id` is what it would register. */
interface Waiting {
  id: string;
  /** The id is registered already: no new actor, `declare` finds it. */
  pass(): void;
  refuse(live: number): void;
  start(fenced: boolean): void;
}

/**
 * Decides whether one more actor may be registered under `[cluster] max_actors`: every
 * registered actor costs a durable consumer on nats-server, so a flood of spawns or
 * activations must stop at the cap instead of exhausting the server.
 *
 * - Per node the cap is exact: an admission counts the actors in the registry mirror
 *   plus the ones this node is registering (their declare in flight, not yet in the
 *   mirror), and reserves its own place in the same synchronous step (200 parallel spawns
 *   against max_actors = 5 registered all 200 when each spawn counted the mirror and then
 *   awaited its own write).
 * - Far from the cap, up to ADMISSIONS_IN_FLIGHT admissions run at once; further ones
 *   wait in arrival order for a free place.
 * - An admission that leaves fewer than FENCE_MARGIN_PER_NODE free places per live node is
 *   fenced: it starts once every other admission of this node has ended, nothing starts
 *   until it ends, and its entry is written with `Nats-Expected-Last-Sequence` set to the
 *   last bucket revision the mirror applied, so it lands only if no other write (another
 *   node's admission included) happened since the count was taken; otherwise it waits
 *   for the mirror and counts again. Near the cap the bound is therefore exact
 *   cluster-wide. Further from it, admissions are not fenced (a fenced write conflicts
 *   with every placement and state write of the bucket, which is what a burst of spawns
 *   makes); there the cap could only be passed if more than the margin's worth of other
 *   nodes' admissions were still unseen by this node's watch at once (docs/security.md,
 *   "Quotas").
 */
export class ActorAdmission {
  /** Ids whose declare runs here → the admission's end: counted until the mirror shows them. */
  private readonly admitting = new Map<string, Promise<void>>();
  private fencing = false;
  private readonly waiting: Waiting[] = [];
  /** Admissions of an id whose earlier admission was running: back in the queue once it ends. */
  private parked = 0;

  constructor(private readonly o: AdmissionOptions) {}

  /**
   * Actors counted against the cap: registered and not killed as this node's mirror shows
   * them, plus the ones this node is registering that the mirror does not show yet.
   */
  live(): number {
    let n = this.o.registry.liveCount();
    // At most ADMISSIONS_IN_FLIGHT ids.
    for (const id of this.admitting.keys()) if (this.o.registry.get(id) === undefined) n++;
    return n;
  }

  view(): AdmissionView {
    return { running: this.admitting.size, waiting: this.waiting.length + this.parked, fenced: this.fencing };
  }

  /**
   * Runs `declare` once the cap allows one more actor and its turn has come (see the class).
   * An id already registered is passed through (`declare` then finds it): it is no new actor.
   * @param declare writes the entry; `fence` (when given) is the bucket revision it must still be at
   * @param full the error to throw at the cap, given the actors counted
   * @throws what `full` returns; KovaError ADMISSION_CONFLICT (retryable) when fenced writes kept losing; whatever `declare` throws
   */
  admit<T>(id: string, declare: (fence: number | undefined) => Promise<T>, full: (live: number) => Error): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.waiting.push({
        id,
        pass: () => void call(() => declare(undefined)).then(resolve, reject),
        refuse: (live) => reject(full(live)),
        start: (fenced) => {
          // Reserved before the write starts: the next decision counts it.
          let ended!: () => void;
          this.admitting.set(id, new Promise<void>((r) => (ended = r)));
          if (fenced) this.fencing = true;
          void call(() => (fenced ? this.fenced(id, declare, full) : declare(undefined)))
            .then(resolve, reject)
            .finally(() => {
              this.admitting.delete(id);
              if (fenced) this.fencing = false;
              ended();
              this.pump();
            });
        },
      });
      this.pump();
    });
  }

  /** Decides for the waiting admissions, oldest first, until one must wait. */
  private pump(): void {
    const { registry, maxActors } = this.o;
    while (this.waiting.length > 0) {
      const next = this.waiting[0]!;
      const running = this.admitting.get(next.id);
      if (running) {
        // The same id twice at once (two spawns of it): the second looks again once the
        // first has ended, when it is registered or failed.
        this.waiting.shift();
        this.parked++;
        void running.then(() => {
          this.parked--;
          this.waiting.unshift(next);
          this.pump();
        });
        continue;
      }
      if (registry.get(next.id)) {
        this.waiting.shift();
        next.pass();
        continue;
      }
      const live = this.live();
      if (live >= maxActors) {
        this.waiting.shift();
        next.refuse(live);
        continue;
      }
      if (this.fencing) return;
      const fenced = this.nearCap(live);
      if (fenced ? this.admitting.size > 0 : this.admitting.size >= ADMISSIONS_IN_FLIGHT) return;
      this.waiting.shift();
      next.start(fenced);
    }
  }

  private nearCap(live: number): boolean {
    return this.o.maxActors - live <= FENCE_MARGIN_PER_NODE * Math.max(1, this.o.liveNodes());
  }

  /** A fenced admission: nothing else of this node runs meanwhile, so the mirror's count is the whole count. */
  private async fenced<T>(id: string, declare: (fence: number | undefined) => Promise<T>, full: (live: number) => Error): Promise<T> {
    const { registry, maxActors } = this.o;
    for (let attempt = 0; attempt < FENCED_ATTEMPTS; attempt++) {
      if (attempt > 0) await sleep(backoffMs(attempt, 2, 100));
      if (registry.get(id)) return declare(undefined);
      const live = registry.liveCount();
      if (live >= maxActors) throw full(live);
      if (!this.nearCap(live)) return declare(undefined);
      try {
        return await declare(registry.watchedRevision());
      } catch (err) {
        if (!(err instanceof FenceConflictError)) throw err;
      }
    }
    throw new KovaError(
      ClusterErrorCode.ADMISSION_CONFLICT,
      `the agents registry kept changing while ${id} was admitted near [cluster] max_actors: try again`,
      {
        retryable: true,
        data: { actorId: id },
      },
    );
  }
}

/** `write()`, with a synchronous throw turned into a rejection. */
function call<T>(write: () => Promise<T>): Promise<T> {
  try {
    return write();
  } catch (err) {
    return Promise.reject(err);
  }
}
