import type { KovaEvent } from "../bus/index.js";

/**
 * The run tree of a session, built from its events: every run (a workflow, a swarm, an
 * agent run, a child run of a tool call, a workflow step or a subtask) is a node under its
 * `parentRunId`, with its status, tokens, cost and duration. The CLI's one live renderer:
 * `kova events tail --tree` and `kova swarm run --follow` draw it through LiveRunTree.
 */
interface RunNode {
  runId: string;
  parentRunId?: string;
  label?: string;
  /** The step or tool call of the parent that started this run (child_run_linked). */
  via?: string;
  status: string;
  startTs?: number;
  endTs?: number;
  inputTokens: number;
  outputTokens: number;
  costUsd: number;
  /** Open approvals of this run. */
  waiting: Map<string, string>;
  order: number;
}

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

export class RunTree {
  private readonly runs = new Map<string, RunNode>();
  private seen = 0;
  /** The newest event time folded in: the clock of a snapshot of past events. */
  lastTs = 0;

  private node(runId: string): RunNode {
    let n = this.runs.get(runId);
    if (!n) {
      n = { runId, status: "running", inputTokens: 0, outputTokens: 0, costUsd: 0, waiting: new Map(), order: this.seen++ };
      this.runs.set(runId, n);
    }
    return n;
  }

  /** Folds one event in; returns true when a run ended with it (`run_stream_end`). */
  apply(e: KovaEvent): boolean {
    const n = this.node(e.runId);
    if (e.ts > this.lastTs) this.lastTs = e.ts;
    const d = (e.data ?? {}) as Record<string, unknown>;
    if (e.parentRunId && !n.parentRunId) n.parentRunId = e.parentRunId;
    n.startTs ??= e.ts;
    switch (e.type) {
      case "run_started":
        n.label = typeof d.agentId === "string" ? d.agentId : n.label;
        n.startTs = e.ts;
        break;
      case "child_run_linked": {
        if (typeof d.childRunId !== "string") break;
        const child = this.node(d.childRunId);
        child.parentRunId ??= e.runId;
        child.via = String(d.stepId ?? d.callId ?? "");
        if (typeof d.agentId === "string") child.label ??= d.agentId;
        break;
      }
      case "model_response":
      case "run_completed":
      case "run_failed": {
        const u = d.usage as Record<string, unknown> | undefined;
        // A run's final usage is its total; model_response usages add up until then. A model
        // call's cost is `costUsd` beside its usage (docs/protocol.md), not inside it.
        if (u && e.type === "model_response") {
          n.inputTokens += num(u.inputTokens);
          n.outputTokens += num(u.outputTokens);
          n.costUsd += num(d.costUsd);
        } else if (u && !(n.runId && this.hasChildren(n.runId))) {
          n.inputTokens = Math.max(n.inputTokens, num(u.inputTokens));
          n.outputTokens = Math.max(n.outputTokens, num(u.outputTokens));
          n.costUsd = Math.max(n.costUsd, num(u.costUsd));
        }
        if (e.type !== "model_response") {
          n.status = e.type === "run_completed" ? "completed" : "failed";
          n.endTs = e.ts;
        }
        break;
      }
      case "run_cancelled":
        n.status = "cancelled";
        n.endTs = e.ts;
        break;
      case "approval_requested":
        // A workflow's wait step, or an agent's tool call.
        n.waiting.set(String(d.approvalId), String(d.stepId ?? (d.tool !== undefined ? `tool ${String(d.tool)}` : d.approvalId)));
        break;
      case "approval_granted":
      case "approval_rejected":
        n.waiting.delete(String(d.approvalId));
        break;
      case "run_stream_end":
        if (typeof d.status === "string") n.status = d.status;
        n.endTs ??= e.ts;
        n.waiting.clear();
        return true;
    }
    return false;
  }

  private hasChildren(runId: string): boolean {
    for (const r of this.runs.values()) if (r.parentRunId === runId) return true;
    return false;
  }

  /** Totals of a run and everything under it. */
  private totals(n: RunNode): { inputTokens: number; outputTokens: number; costUsd: number } {
    const t = { inputTokens: n.inputTokens, outputTokens: n.outputTokens, costUsd: n.costUsd };
    for (const c of this.children(n.runId)) {
      const ct = this.totals(c);
      t.inputTokens += ct.inputTokens;
      t.outputTokens += ct.outputTokens;
      t.costUsd += ct.costUsd;
    }
    return t;
  }

  private children(runId: string): RunNode[] {
    return [...this.runs.values()].filter((r) => r.parentRunId === runId).sort((a, b) => (a.startTs ?? 0) - (b.startTs ?? 0) || a.order - b.order);
  }

  /** Every run has ended. */
  done(): boolean {
    return this.runs.size > 0 && [...this.runs.values()].every((r) => r.status !== "running");
  }

  /** The tree as text lines, roots first (runs whose parent is not in this session's events). */
  render(now = Date.now()): string[] {
    const lines: string[] = [];
    const roots = [...this.runs.values()].filter((r) => !r.parentRunId || !this.runs.has(r.parentRunId)).sort((a, b) => a.order - b.order);
    const line = (n: RunNode, prefix: string, branch: string, childPrefix: string) => {
      const t = this.totals(n);
      const dur = n.startTs === undefined ? "" : `${(((n.endTs ?? now) - n.startTs) / 1000).toFixed(1)}s`;
      const parts = [
        `${n.via ? `${n.via} → ` : ""}${n.label ?? "?"}`,
        n.runId,
        n.status,
        dur,
        t.inputTokens + t.outputTokens > 0 ? `tokens ${t.inputTokens}/${t.outputTokens}` : "",
        t.costUsd > 0 ? `$${t.costUsd.toFixed(4)}` : "",
      ].filter(Boolean);
      lines.push(`${prefix}${branch}${parts.join("  ")}`);
      const kids = this.children(n.runId);
      const waits = [...n.waiting].map(([approvalId, stepId]) => `${stepId}: waiting for approval (kova approve ${n.runId} ${approvalId})`);
      const all = [...kids.map((k) => ({ k })), ...waits.map((w) => ({ w }))];
      all.forEach((item, i) => {
        const last = i === all.length - 1;
        if ("k" in item) line(item.k, `${prefix}${childPrefix}`, last ? "└─ " : "├─ ", last ? "   " : "│  ");
        else lines.push(`${prefix}${childPrefix}${last ? "└─ " : "├─ "}${item.w}`);
      });
    };
    for (const r of roots) line(r, "", "", "");
    return lines;
  }
}

/**
 * Draws a RunTree as events arrive: on a terminal the tree is redrawn in place (and every
 * second, so durations move); piped, a snapshot is printed each time a run ends, and at
 * `finish` when anything changed since, separated by blank lines (the last one is the
 * final tree). A piped snapshot reads durations off the events' own clock, so a replay of
 * a finished run shows the times it had, not the time of the replay.
 */
export class LiveRunTree {
  readonly tree = new RunTree();
  private readonly live: boolean;
  private drawn = 0;
  /** Events folded in since the last draw. */
  private changed = false;
  private readonly timer: NodeJS.Timeout | undefined;

  constructor(private readonly out: { write(text: string): unknown; isTTY?: boolean }) {
    this.live = out.isTTY === true;
    this.timer = this.live ? setInterval(() => this.draw(), 1000) : undefined;
    this.timer?.unref();
  }

  /** Folds one event in and draws; returns true when a run ended with it. */
  apply(e: KovaEvent): boolean {
    const ended = this.tree.apply(e);
    this.changed = true;
    if (this.live || ended) this.draw();
    return ended;
  }

  private draw(): void {
    this.changed = false;
    const lines = this.tree.render(this.live ? Date.now() : this.tree.lastTs);
    if (lines.length === 0) return;
    if (this.live) this.out.write(`${this.drawn > 0 ? `\x1b[${this.drawn}A\x1b[J` : ""}${lines.join("\n")}\n`);
    else this.out.write(`${lines.join("\n")}\n\n`);
    this.drawn = lines.length;
  }

  /** Stops redrawing; piped, prints the final tree. */
  finish(): void {
    if (this.timer) clearInterval(this.timer);
    if (!this.live && this.changed) this.draw();
  }
}
