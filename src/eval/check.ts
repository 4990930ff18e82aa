import { closeMatches, ConfigError, isKovaError } from "../core/index.js";
import { BusErrorCode, type Bus } from "../bus/index.js";
import type { EvalAgentsPort } from "./subject-actor.js";
import { subjectDefinition } from "./subject-actor.js";
import { checkEndpoint } from "./endpoint-guard.js";
import { a2aHeaders, openAiConfig } from "./external.js";
import type { EvalTrust } from "./node-trust.js";
import type { ExperimentSpec } from "./spec.js";
import { loadCodeVerifier } from "./verifiers.js";

/**
 * Checks an expanded spec against the cluster, on the node that starts the experiment:
 * every agent, model and tool a subject or judge names exists here, every actor subject is
 * declared, every external subject can be called from here with what this node lets it read
 * (`[eval.env]`) at an address it lets experiments reach (`[eval] allow_private_endpoints`), every code verifier imports from where the node allows (`[eval] verifier_dirs`).
 * A file can be checked anywhere; this is what only a node knows. Nodes of a cluster carry
 * the same agents, models and modules, so what passes here runs everywhere.
 * @throws ConfigError naming the field as written in the spec (`subjects[1].model`) and the fix
 */
export async function checkSpecOnCluster(spec: ExperimentSpec, deps: { agents: EvalAgentsPort; bus: Bus; trust: EvalTrust }): Promise<void> {
  const agents = deps.agents.definitions();
  const runtime = deps.agents.runtime();
  const checkAgent = (agentId: string, overrides: Parameters<typeof subjectDefinition>[2], key: string) => {
    if (!runtime) throw new ConfigError(`${key}.agent`, `this cluster's nodes run no agents, so there is no agent ${agentId}: add it to [[agents]]`);
    if (!agents.some((a) => a.id === agentId)) {
      const near = closeMatches(
        agentId,
        agents.map((a) => a.id),
        1,
      );
      throw new ConfigError(
        `${key}.agent`,
        `no agent ${JSON.stringify(agentId)} in this cluster${near.length ? ` (did you mean ${near[0]}?)` : ""}: see kova agents ls`,
      );
    }
    if (overrides.model !== undefined && !runtime.modelNames().includes(overrides.model)) {
      const near = closeMatches(overrides.model, runtime.modelNames(), 1);
      throw new ConfigError(
        `${key}.model`,
        `no model ${JSON.stringify(overrides.model)} in this cluster's [models]${near.length ? ` (did you mean ${near[0]}?)` : ""}; it has ${runtime.modelNames().join(", ")}`,
      );
    }
    const def = subjectDefinition(agents, agentId, overrides, key);
    try {
      runtime.opts.tools.resolve(def.tools, `${key}.tools`);
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ConfigError(`${key}.tools`, (err as Error).message, { cause: err });
    }
  };
  for (const [i, s] of spec.subjects.entries()) {
    const key = `subjects[${i}]`;
    if (s.kind === "agent") checkAgent(s.agent, s.overrides, key);
    else if (s.kind === "openai") await checkEndpoint(openAiConfig(s, deps.trust, key).baseUrl, deps.trust, `${key}.openai.base_url`);
    else if (s.kind === "a2a") {
      a2aHeaders(s, deps.trust, key);
      await checkEndpoint(s.url, deps.trust, `${key}.a2a`);
    } else {
      try {
        await deps.bus.checkAgent(s.actor);
      } catch (err) {
        if (isKovaError(err, BusErrorCode.UNKNOWN_AGENT)) throw new ConfigError(`${key}.actor`, `${err.message}`, { cause: err });
        throw err;
      }
    }
  }
  for (const [i, v] of spec.verifiers.entries()) {
    if (v.type === "judge") checkAgent(v.agent, v.model ? { model: v.model } : {}, `verifiers[${i}]`);
    if (v.type === "code") await loadCodeVerifier(v, deps.trust, `verifiers[${i}]`);
  }
}
