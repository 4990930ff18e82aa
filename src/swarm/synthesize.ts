import { addUsage, ZERO_USAGE, type RunUsage } from "../agents/index.js";
import type { ModelCall, Subtask } from "./plan.js";

/** A subtask with the result its agent gave. */
export interface SubtaskResult {
  subtask: Subtask;
  agentId: string;
  output: string;
}

/** A subtask the answer goes without, and why. */
export interface MissingSubtask {
  index: number;
  task: string;
  agentId: string | null;
  reason: string;
}

export interface SynthesizeOptions {
  task: string;
  results: readonly SubtaskResult[];
  missing: readonly MissingSubtask[];
  instructions?: string;
  maxTokens?: number;
  /** Longest output of one subtask put in the prompt (default 8,000 characters). */
  maxResultChars?: number;
  signal?: AbortSignal;
}

export interface SynthesizeResult {
  output: string;
  usage: RunUsage;
  model: string;
}

/**
 * Writes the swarm's one answer with the coordinator's model, from the subtasks' results;
 * the prompt names the subtasks that have none, so the model can say what the answer lacks.
 * @throws ModelCallError from the model
 */
export async function synthesize(call: ModelCall, o: SynthesizeOptions): Promise<SynthesizeResult> {
  const cap = o.maxResultChars ?? 8000;
  const parts = o.results.map((r) => {
    const text = r.output.length > cap ? `${r.output.slice(0, cap)}\n[… ${r.output.length - cap} more characters cut]` : r.output;
    return `### Subtask ${r.subtask.index + 1} (agent ${r.agentId}): ${r.subtask.task}\n${text}`;
  });
  if (o.missing.length > 0) parts.push(`### Missing results\n${o.missing.map(missingLine).join("\n")}`);
  const res = await call({
    messages: [
      {
        role: "system",
        content: [
          "You are the coordinator of a swarm of agents. Write one answer to the user's task from the results of its subtasks.",
          "Where a subtask's result is missing, say what the answer lacks because of it.",
          o.instructions ?? "",
        ]
          .filter(Boolean)
          .join("\n"),
      },
      { role: "user", content: `Task: ${o.task}\n\n${parts.join("\n\n")}` },
    ],
    ...(o.maxTokens ? { maxTokens: o.maxTokens } : {}),
    ...(o.signal ? { signal: o.signal } : {}),
  });
  return { output: res.message.content ?? "", usage: addUsage({ ...ZERO_USAGE }, res.usage), model: res.model };
}

function missingLine(m: MissingSubtask): string {
  return `- subtask ${m.index + 1} (${m.agentId ? `agent ${m.agentId}` : "no agent"}): ${m.task} — ${m.reason}`;
}

/**
 * The note the coordinator puts under a partial answer, so the requester sees what is
 * missing whatever the model wrote.
 */
export function missingNote(missing: readonly MissingSubtask[]): string {
  if (missing.length === 0) return "";
  return `\n\nMissing results (${missing.length}):\n${missing.map(missingLine).join("\n")}`;
}
