import type { Logger } from "../core/index.js";
import type { Bus } from "../bus/index.js";
import type { ActorTemplate, ActorTemplateRegistry, ActorTypeRegistry } from "../actors/index.js";
import type { AgentDefinition, AgentRuntime } from "../agents/index.js";
import type { WorkflowTimers } from "../workflow/index.js";
import {
  EvalStore,
  evalExperimentActor,
  evalSubjectActor,
  EXPERIMENT_IDLE_AFTER_MS,
  EXPERIMENT_TEMPLATE,
  NO_EVAL_TRUST,
  SpecCache,
  SUBJECT_IDLE_AFTER_MS,
  SUBJECT_TEMPLATE,
  type EvalTrust,
} from "../eval/index.js";
import { openOnce } from "./open-once.js";

/** What experiments need from the node; each reaches its part when called (the node boots after types are registered). */
export interface EvalWiringDeps {
  cluster: string;
  bus: () => Bus;
  replicas: () => number;
  agents: () => readonly AgentDefinition[];
  runtime: () => AgentRuntime | undefined;
  timers: () => Promise<WorkflowTimers>;
  interrupt: (agentId: string, messageId: string) => Promise<boolean>;
  /** kova.toml's `[eval]`: what experiments may read of this node (default nothing). */
  trust?: EvalTrust;
  logger: Logger;
}

/**
 * Lets every node run experiments (docs/evals.md): the `eval` actor type (an experiment is
 * `eval--<id>`) and the `eval-subject` type (its subjects' and judges' runners), over the
 * cluster's eval bucket opened once. An application that registered a type of one of these
 * names keeps its own. Their templates are registered by `registerEvalTemplates`, after the
 * node's own (so a list of templates names the cluster's first).
 * @returns the templates to register, and the bucket (opened on first use) that the node's
 *   `control.eval` endpoint stores specs in
 */
export function registerEvalTypes(types: ActorTypeRegistry, deps: EvalWiringDeps): { templates: ActorTemplate[]; store: () => Promise<EvalStore> } {
  const store = openOnce(() => EvalStore.open({ js: deps.bus().js, cluster: deps.cluster, replicas: deps.replicas() }));
  const specs = new SpecCache(store, () => deps.cluster);
  const agents = { definitions: deps.agents, runtime: deps.runtime };
  const trust = deps.trust ?? NO_EVAL_TRUST;
  const templates: ActorTemplate[] = [];
  if (!types.has(EXPERIMENT_TEMPLATE)) {
    types.register(evalExperimentActor({ bus: deps.bus, store, specs, agents, trust, timers: deps.timers, interrupt: deps.interrupt, logger: deps.logger }));
    templates.push({ name: EXPERIMENT_TEMPLATE, type: EXPERIMENT_TEMPLATE, idleAfterMs: EXPERIMENT_IDLE_AFTER_MS });
  }
  if (!types.has(SUBJECT_TEMPLATE)) {
    types.register(evalSubjectActor({ bus: deps.bus, specs, agents, trust, logger: deps.logger }));
    templates.push({ name: SUBJECT_TEMPLATE, type: SUBJECT_TEMPLATE, idleAfterMs: SUBJECT_IDLE_AFTER_MS });
  }
  return { templates, store };
}

/** Registers the experiment templates `registerEvalTypes` returned, unless the node already has templates of those names. */
export function registerEvalTemplates(registry: ActorTemplateRegistry, templates: readonly ActorTemplate[]): void {
  for (const t of templates) if (!registry.list().some((r) => r.name === t.name)) registry.register(t, t.name);
}
