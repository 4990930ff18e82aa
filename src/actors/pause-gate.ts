/**
 * Holds turns at their next step (and new turns before they start) while an actor is
 * paused. A long LLM turn therefore pauses between model calls and tool calls, never in
 * the middle of one, and its journal stays consistent.
 */
export class PauseGate {
  #paused = false;
  /** Made by the first wait while paused: an actor that is never paused holds none. */
  #waiters: Set<() => void> | undefined;

  get paused(): boolean {
    return this.#paused;
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    const waiters = this.#waiters;
    this.#waiters = undefined;
    if (waiters) for (const wake of waiters) wake();
  }

  /** Resolves at once when not paused, else on resume; rejects with the abort reason. */
  wait(signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (!this.#paused) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const waiters = (this.#waiters ??= new Set());
      const onAbort = () => {
        waiters.delete(wake);
        reject(signal?.reason);
      };
      const wake = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      waiters.add(wake);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}
