import { defineActor, type ActorDefinition } from "../actors/index.js";
import type { AgentDefinition } from "./definition.js";
import { runAgentTurn } from "./loop.js";
import { endFailedRun } from "./run-failed-turn.js";
import { AGENT_CHAT, type AgentInfo } from "./run-protocol.js";
import type { AgentState } from "./run-scope.js";
import type { AgentRuntime } from "./runtime.js";
import { emptyTotals } from "./usage.js";

/**
 * The actor type of an agent definition: its type name is the agent's id (or its
 * template's name; an instance `<template>--<key>` shares the type), it takes
 * `task_delegate` and `agent.chat`, and its fast path answers `info_request` and
 * `capability_query` with the agent's model, capabilities, state and usage.
 */
export function agentActor(def: AgentDefinition, runtime: AgentRuntime): ActorDefinition<AgentState> {
  const run = (ctx: Parameters<typeof runAgentTurn>[2]) => runAgentTurn(def, runtime, ctx);
  const info = (agentId: string, state: Readonly<AgentState>): AgentInfo => ({
    agentId,
    model: runtime.knownModel(agentId, def),
    capabilities: [...def.capabilities],
    state: runtime.runState(agentId),
    usage: state.usage,
  });
  return defineActor<AgentState>({
    type: def.id,
    capabilities: [...def.capabilities],
    initialState: () => ({ usage: emptyTotals() }),
    handlers: { task_delegate: run, [AGENT_CHAT]: run },
    rpc: {
      info_request: (env, state) => info(env.to, state),
      capability_query: (env, state) => info(env.to, state),
    },
    // A run's failures end in a failed result, not a throw; what throws is the node's
    // trouble (WAL, NATS), retried in place by the mailbox and the supervisor.
    maxAttempts: 3,
    // A turn that failed without the run ending itself (the node died during every
    // attempt): the run's followers still get its end.
    onTurnFailed: (failure) => endFailedRun(runtime, failure),
  });
}
