import { ArgumentError, isValidId } from "../core/index.js";
import { type ChatMessage, type ModelRequest, type ModelResponse, type ToolCall, addUsage, ZERO_USAGE, type RunUsage } from "../agents/index.js";
import { defineTool, ArgumentRepairBudget, type JsonSchema, type Tool, validateArguments, type ArgumentIssue } from "../tools/index.js";
import { SwarmPlanInvalidError } from "./errors.js";

/** One subtask of a swarm's plan. */
export interface Subtask {
  /** Position in the plan, from 0: part of the subtask's message and run ids. */
  index: number;
  /** What the agent is asked, self-contained. */
  task: string;
  /** The capability an agent needs for it (`capabilities` of its actor type). */
  capability?: string;
  /** A fixed agent id instead of a capability (static plans). */
  agent?: string;
  /** `max_tokens` for this subtask's run (default: the coordinator's). */
  maxTokens?: number;
}

/** How a caller writes a static plan (in the `task_delegate` payload's `plan`, or in code). */
export interface StaticSubtask {
  task: string;
  capability?: string;
  agent?: string;
  max_tokens?: number;
}

/** One model call as the coordinator makes it (its scheduler slot and headers already applied). */
export type ModelCall = (request: ModelRequest) => Promise<ModelResponse>;

export const PLAN_TOOL = "submit_plan";

/**
 * The plan's JSON Schema, narrowed to the capabilities live agents offer now, so a model
 * that names one nobody has gets a precise issue back ("one of research, write").
 */
export function planSchema(capabilities: readonly string[], maxSubtasks: number): JsonSchema {
  const capability: JsonSchema = { type: "string", description: "The capability an agent needs for this subtask." };
  if (capabilities.length > 0) capability.enum = [...capabilities];
  return {
    type: "object",
    properties: {
      subtasks: {
        type: "array",
        minItems: 1,
        maxItems: maxSubtasks,
        description: "Independent subtasks that can run in parallel.",
        items: {
          type: "object",
          properties: {
            task: { type: "string", minLength: 1, description: "The subtask, self-contained: the agent sees nothing else." },
            capability,
          },
          required: ["task", "capability"],
          additionalProperties: false,
        },
      },
    },
    required: ["subtasks"],
    additionalProperties: false,
  };
}

function planTool(capabilities: readonly string[], maxSubtasks: number): Tool<{ subtasks: Array<{ task: string; capability: string }> }> {
  return defineTool({
    name: PLAN_TOOL,
    description: "Submit the plan: the subtasks to delegate, each with the capability it needs.",
    idempotent: true,
    parameters: planSchema(capabilities, maxSubtasks),
    // Never run: the coordinator reads the validated arguments as the plan.
    run: () => null,
  });
}

export interface DecomposeOptions {
  coordinator: string;
  task: string;
  /** Capabilities of live agents; the plan must use these. */
  capabilities: readonly string[];
  maxSubtasks: number;
  /** Invalid plans the model may repair (default 2). */
  maxRepairs?: number;
  /** Extra guidance for the planner (the coordinator's `instructions`). */
  instructions?: string;
  maxTokens?: number;
  signal?: AbortSignal;
}

export interface DecomposeResult {
  subtasks: Subtask[];
  usage: RunUsage;
  /** Model calls made (1 + repairs). */
  calls: number;
  model: string;
}

/**
 * Asks the model for a plan through a `submit_plan` tool call (structured output every
 * OpenAI-compatible server supports), validates it against the plan's JSON Schema with
 * ajv (tools/validate.ts), and sends the issues back for repair like invalid tool
 * arguments, within a bounded number of repairs (ArgumentRepairBudget). A model that
 * answers with a JSON text instead of the tool call is accepted too.
 * @throws SwarmPlanInvalidError when the repairs run out; ModelCallError from the model
 */
export async function decompose(call: ModelCall, o: DecomposeOptions): Promise<DecomposeResult> {
  const tool = planTool(o.capabilities, o.maxSubtasks);
  const budget = new ArgumentRepairBudget(o.maxRepairs ?? 2);
  const messages: ChatMessage[] = [
    { role: "system", content: plannerPrompt(o) },
    { role: "user", content: o.task },
  ];
  let usage: RunUsage = { ...ZERO_USAGE };
  for (let calls = 1; ; calls++) {
    const res = await call({
      messages,
      tools: [{ name: tool.name, description: tool.description, parameters: tool.parameters }],
      ...(o.maxTokens ? { maxTokens: o.maxTokens } : {}),
      ...(o.signal ? { signal: o.signal } : {}),
    });
    usage = addUsage(usage, res.usage);
    const planCall = res.message.toolCalls?.find((t) => t.name === PLAN_TOOL);
    const raw = planCall ? planCall.arguments : jsonIn(res.message.content);
    const check =
      raw === undefined
        ? { ok: false as const, issues: [{ path: "$", expected: `a call of ${PLAN_TOOL} with the plan`, given: shorten(res.message.content ?? "no text") }] }
        : validateArguments(tool, raw);
    if (check.ok) {
      const subtasks = check.args.subtasks.map((s, index) => ({ index, task: s.task, capability: s.capability }));
      return { subtasks, usage, calls, model: res.model };
    }
    const verdict = budget.onInvalid(PLAN_TOOL, check.issues);
    if (verdict.action === "fail") throw new SwarmPlanInvalidError(o.coordinator, calls, check.issues, { usage, model: res.model });
    messages.push(res.message, ...repairMessages(res.message.toolCalls ?? [], planCall, check.issues));
  }
}

/** Answers every tool call of the rejected response (the wire protocol requires it), then says what to fix. */
function repairMessages(toolCalls: readonly ToolCall[], planCall: ToolCall | undefined, issues: readonly ArgumentIssue[]): ChatMessage[] {
  const feedback = JSON.stringify({ error: "PLAN_INVALID", issues, fix: `call ${PLAN_TOOL} again with a corrected plan` });
  const out: ChatMessage[] = toolCalls.map((t) => ({
    role: "tool" as const,
    toolCallId: t.id,
    content: t === planCall ? feedback : JSON.stringify({ error: "UNKNOWN_TOOL", message: `only ${PLAN_TOOL} can be called here` }),
  }));
  if (!planCall) out.push({ role: "user", content: `That is not a valid plan: ${feedback}` });
  return out;
}

function plannerPrompt(o: DecomposeOptions): string {
  return [
    "You are the coordinator of a swarm of agents. Split the user's task into independent subtasks that agents can work on in parallel,",
    `at most ${o.maxSubtasks}, each self-contained (the agent sees only its subtask) and each with the capability it needs.`,
    o.capabilities.length > 0 ? `Capabilities available: ${o.capabilities.join(", ")}.` : "",
    `Answer by calling ${PLAN_TOOL}.`,
    o.instructions ?? "",
  ]
    .filter(Boolean)
    .join("\n");
}

/** The first JSON object in a text answer (models that ignore tools often fence it in ```json). */
function jsonIn(text: string | null): string | undefined {
  if (!text) return undefined;
  const start = text.indexOf("{");
  const end = text.lastIndexOf("}");
  return start >= 0 && end > start ? text.slice(start, end + 1) : undefined;
}

function shorten(s: string): string {
  return s.length > 80 ? `${s.slice(0, 79)}…` : s;
}

/**
 * Checks a caller's static plan.
 * @throws ArgumentError naming the entry and field at fault
 */
export function readStaticPlan(raw: unknown, maxSubtasks: number, field = "payload.plan"): Subtask[] {
  if (!Array.isArray(raw) || raw.length === 0) {
    throw new ArgumentError(field, 'must be a non-empty array of subtasks, e.g. [{ "task": "...", "capability": "research" }]');
  }
  if (raw.length > maxSubtasks) throw new ArgumentError(field, `has ${raw.length} subtasks; this coordinator takes at most ${maxSubtasks} (max_subtasks)`);
  return raw.map((entry, index) => {
    const at = `${field}[${index}]`;
    if (typeof entry !== "object" || entry === null || Array.isArray(entry))
      throw new ArgumentError(at, "must be an object with task and capability (or agent)");
    const e = entry as Record<string, unknown>;
    if (typeof e.task !== "string" || e.task.trim() === "") throw new ArgumentError(`${at}.task`, "is required: the subtask as text");
    const s: Subtask = { index, task: e.task };
    if (e.capability !== undefined) {
      if (typeof e.capability !== "string" || e.capability === "") throw new ArgumentError(`${at}.capability`, "must be a capability name");
      s.capability = e.capability;
    }
    if (e.agent !== undefined) {
      if (!isValidId(e.agent)) throw new ArgumentError(`${at}.agent`, "must be an agent id of [A-Za-z0-9_-]");
      s.agent = e.agent;
    }
    if (s.capability === undefined && s.agent === undefined) throw new ArgumentError(at, "needs a capability or an agent");
    if (e.max_tokens !== undefined) {
      if (!Number.isInteger(e.max_tokens) || (e.max_tokens as number) < 1) throw new ArgumentError(`${at}.max_tokens`, "must be a positive integer");
      s.maxTokens = e.max_tokens as number;
    }
    return s;
  });
}
