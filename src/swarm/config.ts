import { intValue, rejectUnknown, stringList, stringValue, tablesAt, ConfigError, isValidId, durationMs } from "../core/index.js";
import { DEFAULT_MAX_SUBTASKS, DEFAULT_SWARM_DEADLINE_MS } from "./coordinator.js";

/**
 * `[[swarms]]` of kova.toml: coordinators the node defines from config (docs/swarm.md).
 *
 * ```toml
 * [models.planner]              # see docs/models.md
 * base_url = "http://127.0.0.1:11434/v1"
 * model = "qwen2.5:7b"
 *
 * [[swarms]]
 * id = "planner"                # the coordinator's agent id: kova swarm run "..." --coordinator planner
 * model = "planner"             # a [models.<name>] entry, for the plan and the answer
 * max_subtasks = 20
 * deadline = "5min"             # when the request sets none
 * subtask_max_tokens = 2000     # max_tokens of each subtask's run
 * plan_repairs = 2              # invalid plans the model may repair
 * instructions = "Prefer one subtask per product."     # planner guidance
 * synthesis_instructions = "Answer in a table."
 * capabilities = []             # what the coordinator offers to other coordinators
 * ```
 */
export interface SwarmSpec {
  id: string;
  /** The `[models.<name>]` entry. */
  model: string;
  maxSubtasks: number;
  deadlineMs: number;
  subtaskMaxTokens?: number;
  planRepairs?: number;
  instructions?: string;
  synthesisInstructions?: string;
  capabilities: string[];
}

const KEYS = ["id", "model", "max_subtasks", "deadline", "subtask_max_tokens", "plan_repairs", "instructions", "synthesis_instructions", "capabilities"];

/** The actor type the node registers for a `[[swarms]]` entry. */
export function swarmActorType(id: string): string {
  return `swarm-${id}`;
}

/**
 * Checks the `swarms` array of a parsed kova.toml.
 * @param models names of the `[models.<name>]` entries, to check each swarm's `model`
 * @throws ConfigError naming the key as written (`swarms[1].model`) and the fix
 */
export function swarmsConfigFrom(raw: unknown, models: ReadonlySet<string>): SwarmSpec[] {
  const seen = new Set<string>();
  return tablesAt(raw, "swarms", "write each coordinator as [[swarms]] with id and model").map(({ table: t, key }) => {
    rejectUnknown(t, KEYS, `${key}.`);
    const id = stringValue(t.id, `${key}.id`);
    // Short enough that its actor type, `swarm-<id>`, is an id too.
    if (!id || !isValidId(id) || id.length > 120)
      throw new ConfigError(`${key}.id`, 'is required: the coordinator\'s agent id, 1-120 characters of [A-Za-z0-9_-], e.g. id = "planner"');
    if (seen.has(id)) throw new ConfigError(`${key}.id`, `${JSON.stringify(id)} is used by two [[swarms]] entries`);
    seen.add(id);
    const model = stringValue(t.model, `${key}.model`);
    if (!model) throw new ConfigError(`${key}.model`, 'is required: name a [models.<name>] entry, e.g. model = "planner"');
    if (!models.has(model)) {
      throw new ConfigError(
        `${key}.model`,
        `no [models.${model}] entry; define it (docs/models.md)${models.size ? ` or use one of ${[...models].join(", ")}` : ""}`,
      );
    }
    const spec: SwarmSpec = {
      id,
      model,
      maxSubtasks: intValue(t.max_subtasks, `${key}.max_subtasks`, 1, 1000) ?? DEFAULT_MAX_SUBTASKS,
      deadlineMs: t.deadline === undefined ? DEFAULT_SWARM_DEADLINE_MS : durationMs(t.deadline, `${key}.deadline`),
      capabilities: stringList(t.capabilities, `${key}.capabilities`, '["plan"]') ?? [],
    };
    const maxTokens = intValue(t.subtask_max_tokens, `${key}.subtask_max_tokens`, 1, 10_000_000);
    if (maxTokens !== undefined) spec.subtaskMaxTokens = maxTokens;
    const repairs = intValue(t.plan_repairs, `${key}.plan_repairs`, 0, 20);
    if (repairs !== undefined) spec.planRepairs = repairs;
    const instructions = stringValue(t.instructions, `${key}.instructions`);
    if (instructions) spec.instructions = instructions;
    const synthesis = stringValue(t.synthesis_instructions, `${key}.synthesis_instructions`);
    if (synthesis) spec.synthesisInstructions = synthesis;
    return spec;
  });
}
