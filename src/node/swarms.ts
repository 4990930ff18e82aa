import type { Logger } from "../core/index.js";
import type { Bus } from "../bus/index.js";
import { type InterruptDelegation, createOpenAiModel, type ModelCallScheduler } from "../agents/index.js";
import type { ActorTypeRegistry } from "../actors/index.js";
import { defineCoordinator, swarmActorType } from "../swarm/index.js";
import type { NodeConfig } from "./config.js";

/**
 * Registers one coordinator actor type per `[[swarms]]` entry (type `swarm-<id>`; the
 * config already lists the coordinator among its actors). Each coordinator's model is
 * created on its first call (the `openai` SDK loads only then), and every call takes a
 * slot of that model on the node's one scheduler, the one its agents use too: a model's
 * `max_concurrency` bounds the node's calls to it, whoever makes them.
 */
export function registerSwarms(
  config: NodeConfig,
  types: ActorTypeRegistry,
  ports: { bus: () => Bus; interrupt: InterruptDelegation },
  scheduler: ModelCallScheduler,
  logger: Logger,
): void {
  for (const spec of config.swarms) {
    const modelConfig = config.models.get(spec.model)!;
    types.register(
      defineCoordinator({
        type: swarmActorType(spec.id),
        model: () => createOpenAiModel(modelConfig, { logger }),
        // Priced as the model's agents are: the swarm's plan and answer count in its cost.
        ...(modelConfig.price ? { price: modelConfig.price } : {}),
        scheduler,
        bus: ports.bus,
        interrupt: ports.interrupt,
        capabilities: spec.capabilities,
        maxSubtasks: spec.maxSubtasks,
        deadlineMs: spec.deadlineMs,
        ...(spec.subtaskMaxTokens !== undefined ? { subtaskMaxTokens: spec.subtaskMaxTokens } : {}),
        ...(spec.planRepairs !== undefined ? { planRepairs: spec.planRepairs } : {}),
        instructions: {
          ...(spec.instructions ? { plan: spec.instructions } : {}),
          ...(spec.synthesisInstructions ? { synthesize: spec.synthesisInstructions } : {}),
        },
        logger,
      }),
    );
  }
}
