import type { KovaEvent } from "../bus/index.js";

/**
 * A minimal live view of a run's events for `kova swarm run --follow`: one line per event,
 * indented by the run's depth in the session's tree (a child under the run that linked
 * it), with the few fields that say what happened. Tokens are skipped.
 */
export class FollowPrinter {
  private readonly depth = new Map<string, number>();

  constructor(
    private readonly write: (line: string) => void,
    private readonly started = Date.now(),
  ) {}

  print(e: KovaEvent): void {
    if (e.type === "token") return;
    const data = (e.data ?? {}) as Record<string, unknown>;
    if (!this.depth.has(e.runId)) this.depth.set(e.runId, e.parentRunId ? (this.depth.get(e.parentRunId) ?? 0) + 1 : 0);
    const level = this.depth.get(e.runId)!;
    if (e.type === "child_run_linked" && typeof data.childRunId === "string") this.depth.set(data.childRunId, level + 1);
    const secs = ((e.ts - this.started) / 1000).toFixed(1).padStart(6);
    this.write(`${secs}s ${"  ".repeat(level)}${e.type} ${shortId(e.runId)}${describe(e.type, data)}`);
  }
}

function shortId(id: string): string {
  return id.length > 18 ? `${id.slice(0, 17)}…` : id;
}

function clip(s: unknown, n = 70): string {
  const t = String(s ?? "").replace(/\s+/g, " ");
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}

function describe(type: string, d: Record<string, unknown>): string {
  const usage = d.usage as { inputTokens?: number; outputTokens?: number } | undefined;
  const tokens = usage ? ` (${usage.inputTokens ?? 0} in / ${usage.outputTokens ?? 0} out tokens)` : "";
  switch (type) {
    case "run_started":
      return ` ${d.agentId ?? ""}: ${clip(d.input)}`;
    case "swarm_planned":
      return ` ${(d.subtasks as unknown[] | undefined)?.length ?? 0} subtasks`;
    case "child_run_linked":
      return ` → ${d.agentId ?? ""} ${shortId(String(d.childRunId ?? ""))}${d.task ? `: ${clip(d.task, 50)}` : ""}`;
    case "model_call":
      return ` ${d.model ?? ""}${d.purpose ? ` ${d.purpose}` : ""}${tokens}`;
    case "tool_call":
      return ` ${d.tool ?? ""}`;
    case "run_completed":
      return `${tokens}: ${clip(d.output)}`;
    case "run_failed":
      return `: ${clip((d.error as { message?: string } | undefined)?.message)}`;
    case "swarm_partial":
      return ` missing ${(d.missing as unknown[] | undefined)?.length ?? 0}`;
    case "run_stream_end":
      return ` ${d.status ?? ""}`;
    default:
      return "";
  }
}
