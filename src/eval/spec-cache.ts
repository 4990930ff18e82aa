import { ExperimentNotFoundError } from "./errors.js";
import type { ExperimentSpec } from "./spec.js";
import type { EvalStore } from "./store.js";

/** Experiments whose spec a node keeps in memory: every turn of an experiment and its subjects reads it. */
const KEPT = 64;

/**
 * A node's copies of experiments' specs, read from KV once each. A stored spec never changes
 * (it is named by its digest), so a copy is never stale; a failed read is forgotten and
 * tried again by the next turn.
 */
export class SpecCache {
  readonly #specs = new Map<string, Promise<{ spec: ExperimentSpec; digest: string }>>();
  /** The specs read so far, for a caller that cannot wait (`peek`). */
  readonly #read = new Map<string, ExperimentSpec>();

  constructor(
    private readonly store: () => Promise<EvalStore>,
    private readonly cluster: () => string,
  ) {}

  /**
   * @throws ExperimentNotFoundError when KV holds no spec for the experiment; what the store throws
   */
  get(experimentId: string): Promise<{ spec: ExperimentSpec; digest: string }> {
    let p = this.#specs.get(experimentId);
    if (!p) {
      p = this.store()
        .then((s) => s.getSpec(experimentId))
        .then((found) => {
          if (!found) throw new ExperimentNotFoundError(experimentId, this.cluster());
          if (this.#specs.has(experimentId)) this.#read.set(experimentId, found.spec);
          return found;
        });
      p.catch(() => this.#specs.delete(experimentId));
      this.#specs.set(experimentId, p);
      if (this.#specs.size > KEPT) {
        const oldest = this.#specs.keys().next().value!;
        this.#specs.delete(oldest);
        this.#read.delete(oldest);
      }
    }
    return p;
  }

  /** The spec if this node has read it already, else undefined (without reading it). */
  peek(experimentId: string): ExperimentSpec | undefined {
    return this.#read.get(experimentId);
  }
}
