import { defineActor } from "./definition.js";

export interface CounterState {
  count: number;
  /** Envelope ids of the task_delegate messages counted, in arrival order. */
  ids: string[];
}

/**
 * The built-in `counter` type, for tests, demos and checking a deployment. Each
 * `task_delegate` adds its envelope id (once: an id already seen is ignored) in a
 * journaled step; `info_request` on the fast path returns `{ count, ids }`.
 */
export const counterActor = defineActor<CounterState>({
  type: "counter",
  capabilities: ["count"],
  initialState: () => ({ count: 0, ids: [] }),
  handlers: {
    task_delegate: async (ctx) => {
      const id = ctx.message.id;
      if (ctx.state.ids.includes(id)) return { count: ctx.state.count, duplicate: true };
      // The step journals the id before the state changes; the runtime restores the state
      // from the turn's start on a retry, so mutating in place is safe.
      const counted = await ctx.step("count", () => id, { idempotent: true });
      ctx.state.ids.push(counted);
      ctx.state.count += 1;
      return { count: ctx.state.count };
    },
  },
  rpc: {
    info_request: (_env, state) => ({ count: state.count, ids: state.ids }),
  },
});
