import { InvalidTransitionError } from "./errors.js";

/** The states of an actor on its host. See docs/actors.md for the diagram. */
export const ActorStates = ["Created", "Idle", "Running", "Paused", "Recovering", "Completed", "Failed"] as const;
export type ActorState = (typeof ActorStates)[number];

/**
 * Allowed transitions. Paused can be entered mid-turn (the turn waits at its next step) and
 * left back into the state it interrupted; Failed is left only by an explicit resume;
 * Completed is terminal for this host (a later start makes a new lifecycle).
 */
const TRANSITIONS: Readonly<Record<ActorState, readonly ActorState[]>> = {
  Created: ["Idle", "Recovering", "Paused", "Failed", "Completed"],
  Recovering: ["Idle", "Paused", "Failed", "Completed"],
  Idle: ["Running", "Paused", "Failed", "Completed"],
  Running: ["Idle", "Paused", "Failed", "Completed"],
  Paused: ["Idle", "Running", "Recovering", "Failed", "Completed"],
  Failed: ["Idle", "Completed"],
  Completed: [],
};

export function canTransition(from: ActorState, to: ActorState): boolean {
  return TRANSITIONS[from].includes(to);
}

export type StateListener = (state: ActorState, previous: ActorState, info?: unknown) => void;

/** One actor's state machine: every change is validated and reported to the listener. */
export class ActorLifecycle {
  #state: ActorState = "Created";

  constructor(
    readonly actorId: string,
    private readonly listener?: StateListener,
  ) {}

  get state(): ActorState {
    return this.#state;
  }

  /**
   * Moves to `to`; a move to the current state is a no-op (signals may repeat).
   * @throws InvalidTransitionError when the diagram has no such edge
   */
  transition(to: ActorState, info?: unknown): void {
    const from = this.#state;
    if (from === to) return;
    if (!canTransition(from, to)) throw new InvalidTransitionError(this.actorId, from, to);
    this.#state = to;
    this.listener?.(to, from, info);
  }

  /** Like `transition`, but reports false instead of throwing. */
  tryTransition(to: ActorState, info?: unknown): boolean {
    if (this.#state !== to && !canTransition(this.#state, to)) return false;
    this.transition(to, info);
    return true;
  }

  get terminal(): boolean {
    return this.#state === "Completed";
  }
}
