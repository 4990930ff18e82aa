import { closeMatches, componentLogger, silentLogger, ConfigError, type Logger } from "../core/index.js";
import type { Bus } from "../bus/index.js";
import { defineActor, type ActorContext, type ActorDefinition } from "../actors/index.js";
import {
  agentActor,
  createOpenAiModel,
  defineAgent,
  emptyTotals,
  type AgentDefinition,
  type AgentResult,
  type AgentRuntime,
  type AgentState,
  type ModelClient,
  type ModelConfig,
} from "../agents/index.js";
import { SubjectUnavailableError } from "./errors.js";
import { runExternalSubject } from "./external.js";
import type { EvalTrust } from "./node-trust.js";
import { parseRunnerKey, SUBJECT_TEMPLATE, type RunnerKey } from "./protocol.js";
import type { SpecCache } from "./spec-cache.js";
import type { AgentOverrides, ExperimentSpec } from "./spec.js";

/** The agents of the node: their definitions, and the runtime that runs them. */
export interface EvalAgentsPort {
  /** Every agent definition (plain and templates) the node hosts. */
  definitions(): readonly AgentDefinition[];
  /** The node's agent runtime; undefined on a node without agents. */
  runtime(): AgentRuntime | undefined;
}

export interface SubjectActorPorts {
  bus: () => Bus;
  specs: SpecCache;
  agents: EvalAgentsPort;
  /** What this node lets experiments read of its environment (kova.toml `[eval]`): external subjects' keys. */
  trust: EvalTrust;
  /** Builds an external subject's model client (default: the `openai` package). */
  modelFactory?: (config: ModelConfig, logger: Logger) => Promise<ModelClient>;
  logger?: Logger;
}

/**
 * The definition an agent subject (or a judge) runs: the declared agent's, with the
 * subject's overrides. Not a template: instances of `eval-subject` run it one task at a time.
 * @throws SubjectUnavailableError when this node has no such agent
 * @throws ConfigError naming the override at fault (defineAgent's checks)
 */
export function subjectDefinition(agents: readonly AgentDefinition[], agentId: string, o: AgentOverrides, key: string): AgentDefinition {
  const base = agents.find((a) => a.id === agentId);
  if (!base) {
    const near = closeMatches(
      agentId,
      agents.map((a) => a.id),
      1,
    );
    throw new SubjectUnavailableError(
      agentId,
      `no agent ${agentId} is defined on this node${near.length ? ` (did you mean ${near[0]}?)` : ""}: every node needs the same [[agents]]`,
    );
  }
  return defineAgent(
    {
      id: base.id,
      model: o.model ?? base.model,
      system: o.system ?? base.system,
      tools: o.tools ?? base.tools,
      approval: { tools: base.approval.tools, timeoutMs: base.approval.timeoutMs },
      memory: base.memory,
      budget: base.budget,
      run: base.run,
      hooks: base.hooks,
      capabilities: base.capabilities,
      ...((o.temperature ?? base.temperature) === undefined ? {} : { temperature: o.temperature ?? base.temperature }),
      ...((o.maxOutputTokens ?? base.maxOutputTokens) === undefined ? {} : { maxOutputTokens: o.maxOutputTokens ?? base.maxOutputTokens }),
      ...(base.priority === undefined ? {} : { priority: base.priority }),
    },
    key,
  );
}

/** Who a runner key names: an agent subject or judge (its agent and overrides), or an external subject. */
function runnerTarget(spec: ExperimentSpec, k: RunnerKey): { agent: string; overrides: AgentOverrides; key: string } | ExperimentSpec["subjects"][number] {
  if (k.role === "j") {
    const v = spec.verifiers[k.index];
    if (v?.type !== "judge") throw new SubjectUnavailableError(`verifier ${k.index}`, "is not a judge");
    return { agent: v.agent, overrides: v.model ? { model: v.model } : {}, key: `verifiers[${k.index}]` };
  }
  const s = spec.subjects[k.index];
  if (!s) throw new SubjectUnavailableError(`subject ${k.index}`, "the experiment has no such subject");
  return s;
}

/**
 * The `eval-subject` actor type: its instances `eval-subject--<experiment>-s<i>-<slot>` run
 * subject `i` of an experiment, `…-j<v>-<slot>` its judge verifier `v`, one task at a time.
 * An agent subject runs as the agent itself would (its decision loop, journaled, its events,
 * its usage) under the instance's id, from the agent's definition with the subject's
 * overrides; an external subject is called from a journaled step. Either way the answer is
 * the agent protocol's `result_notify`. Register it (and the template of the same name) on
 * every node; a KovaNode does.
 */
export function evalSubjectActor(ports: SubjectActorPorts): ActorDefinition<AgentState> {
  const log = componentLogger(ports.logger ?? silentLogger(), "eval-subject");
  const agentTypes = new Map<string, ActorDefinition<AgentState>>();
  const models = new Map<string, Promise<ModelClient>>();

  const unavailable = (ctx: ActorContext<AgentState>, err: unknown): AgentResult => {
    const p = (ctx.message.payload ?? {}) as { runId?: unknown; sessionId?: unknown };
    const runId = typeof p.runId === "string" ? p.runId : ctx.message.id;
    log.warn({ err, actorId: ctx.actorId }, "cannot run this subject here");
    const e = err instanceof SubjectUnavailableError || err instanceof ConfigError ? err : new SubjectUnavailableError(ctx.actorId, String(err));
    return {
      output: "",
      usage: { inputTokens: 0, outputTokens: 0 },
      runId,
      sessionId: typeof p.sessionId === "string" ? p.sessionId : runId,
      status: "failed",
      error: { code: e.code, message: e.message },
      node: ctx.nodeId,
    };
  };

  const handle = async (ctx: ActorContext<AgentState>): Promise<unknown> => {
    const k = parseRunnerKey(ctx.template?.key ?? "");
    if (!k) return unavailable(ctx, new SubjectUnavailableError(ctx.actorId, `is not an ${SUBJECT_TEMPLATE}--<experiment>-<s|j><index>-<slot> instance`));
    let target: ReturnType<typeof runnerTarget>;
    let spec: ExperimentSpec;
    try {
      spec = (await ports.specs.get(k.experimentId)).spec;
      target = runnerTarget(spec, k);
    } catch (err) {
      if (err instanceof SubjectUnavailableError) return unavailable(ctx, err);
      throw err;
    }
    if ("kind" in target && (target.kind === "openai" || target.kind === "a2a")) {
      const cacheKey = `${k.experimentId}/${target.id}`;
      return runExternalSubject(ctx as ActorContext<unknown>, target, {
        bus: ports.bus(),
        trust: ports.trust,
        key: `subjects[${k.index}]`,
        modelClient: (config) => {
          let m = models.get(cacheKey);
          if (!m) {
            // No redirects: the guard checked the endpoint's address, not where a redirect leads.
            m = (ports.modelFactory ?? ((c, l) => createOpenAiModel(c, { logger: l, followRedirects: false })))(config, log);
            m.catch(() => models.delete(cacheKey));
            models.set(cacheKey, m);
          }
          return m;
        },
      });
    }
    if ("kind" in target && target.kind === "actor")
      return unavailable(ctx, new SubjectUnavailableError(target.id, "an actor subject is delegated to directly"));
    const agent =
      "kind" in target
        ? { agent: (target as { agent: string }).agent, overrides: (target as { overrides: AgentOverrides }).overrides, key: `subjects[${k.index}]` }
        : target;
    const typeKey = `${k.experimentId}/${k.role}${k.index}`;
    let type = agentTypes.get(typeKey);
    if (!type) {
      const runtime = ports.agents.runtime();
      if (!runtime)
        return unavailable(ctx, new SubjectUnavailableError(agent.agent, "this node runs no agents: give it the cluster's [[agents]] and [models]"));
      try {
        type = agentActor(subjectDefinition(ports.agents.definitions(), agent.agent, agent.overrides, agent.key), runtime);
      } catch (err) {
        return unavailable(ctx, err);
      }
      agentTypes.set(typeKey, type);
      // One per experiment subject: forget the oldest when many experiments ran on this node.
      if (agentTypes.size > 256) agentTypes.delete(agentTypes.keys().next().value!);
    }
    const result = (await type.handlers.task_delegate!(ctx)) as AgentResult;
    // When the run ended: the experiment's turn takes its time from the answer instead of reading a clock.
    return { ...result, at: ctx.now() };
  };

  return defineActor<AgentState>({
    type: SUBJECT_TEMPLATE,
    capabilities: [],
    initialState: () => ({ usage: emptyTotals() }),
    handlers: { task_delegate: handle },
    rpc: { info_request: (env, state) => ({ agentId: env.to, state: "Idle", usage: state.usage }) },
    // As an agent's: a run's failures end in a failed result; what throws is the node's trouble.
    maxAttempts: 3,
  });
}
