import { defineActor, type ActorDefinition } from "../actors/index.js";
import { createOpenAiModel, ModelCallScheduler, type SchedulePolicy } from "../agents/index.js";
import { scriptedReply } from "./scripted-model-replies.js";
import { type ScriptedModelServer, startScriptedModelServer } from "./scripted-model-server.js";

/** The payload of a task_delegate to a `job` instance. */
export interface ModelCallTask {
  /** false: the task only activates the instance, without a model call (default true). */
  call?: boolean;
  /** The fair-share key (default the instance's id). */
  user?: string;
  /** For `priority`: higher goes first. */
  priority?: number;
  /** For `deadline`: epoch ms by which the call should be answered. */
  deadline?: number;
}

export interface ModelCallLoadOptions {
  policy: SchedulePolicy;
  maxConcurrency: number;
  /** How long the scripted model takes to answer each call. */
  latencyMs: number;
  /** Called when a task is done: its call (if any) answered and journaled. */
  onDone?: (actorId: string, task: ModelCallTask) => void;
}

export interface ModelCallLoad extends AsyncDisposable {
  /**
   * The actor type `job`. Register it with a template of the same name
   * (`[[actor_templates]] name = "job", type = "job"`), then address `job--<key>`.
   */
  actor: ActorDefinition<{ calls: number }>;
  /** Give it to the node (`KovaNode.start({ modelScheduler })`): the calls queue on it. */
  scheduler: ModelCallScheduler;
  /** The scheduler's name for the scripted model. */
  modelName: string;
  server: ScriptedModelServer;
}

/**
 * Load for the model-call scheduler without agents in the way, to see how a policy orders
 * many instances' calls: a scripted model answering "ok" after `latencyMs`, a scheduler
 * with `maxConcurrency` slots for it, and an actor type each of whose tasks makes one call
 * through those slots the way an agent's model step does (a journaled idempotent step;
 * the task's user, priority and deadline are what the policies order by).
 * Disposing of it stops the model server.
 */
export async function startModelCallLoad(opts: ModelCallLoadOptions): Promise<ModelCallLoad> {
  const modelName = "fast";
  const server = await startScriptedModelServer({ handler: () => scriptedReply.text("ok"), latencyMs: opts.latencyMs });
  const model = await createOpenAiModel({ name: modelName, baseUrl: server.url, model: "scripted-model", apiKey: "scripted", maxRetries: 0 });
  const scheduler = new ModelCallScheduler([[modelName, { maxConcurrency: opts.maxConcurrency, policy: opts.policy }]]);
  const actor = defineActor<{ calls: number }>({
    type: "job",
    initialState: () => ({ calls: 0 }),
    handlers: {
      task_delegate: async (ctx) => {
        const task = (ctx.message.payload ?? {}) as ModelCallTask;
        if (task.call !== false) {
          await ctx.step(
            "model",
            async () => {
              const res = await model.complete({
                messages: [{ role: "user", content: "go" }],
                signal: ctx.signal,
                acquireSlot: scheduler.slotFor({
                  model: modelName,
                  agentId: ctx.actorId,
                  signal: ctx.signal,
                  ...(task.user !== undefined ? { shareKey: task.user } : {}),
                  ...(task.priority !== undefined ? { priority: task.priority } : {}),
                  ...(task.deadline !== undefined ? { deadline: task.deadline } : {}),
                }),
              });
              return res.message.content;
            },
            { idempotent: true },
          );
          ctx.state.calls += 1;
        }
        opts.onDone?.(ctx.actorId, task);
        return null;
      },
    },
  });
  return { actor, scheduler, modelName, server, [Symbol.asyncDispose]: () => server[Symbol.asyncDispose]() };
}
