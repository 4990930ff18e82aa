import { randomUUID } from "node:crypto";
import { Role, TaskState, type Message, type Part, type StreamResponse, type Task } from "@a2a-js/sdk";
import type { KovaEvent } from "../bus/index.js";
import { addUsage, isRunStatus, reportedUsage, ZERO_USAGE, type AgentResult, type RunUsage } from "../agents/index.js";
import { publicError } from "../core/index.js";
import { publicEventData } from "./public-events.js";

/**
 * A Kova run seen as an A2A task. The run's events on NATS are the source of truth; this
 * folds them, one at a time, into the task and the stream updates A2A clients see. Every
 * gateway replica folds the same events into the same task, which is why any replica can
 * answer for any task, and why one that restarts picks a running task up again.
 *
 * | Kova event | A2A |
 * | --- | --- |
 * | (message stored) | `submitted` |
 * | `run_started`, `tool_call`, `tool_result`, anything after an approval | `working` (tool steps as status messages) |
 * | `model_delta` | artifact update, appended to the `answer` artifact |
 * | `model_delta {restart}` (a cut model stream is retried) | artifact update replacing the answer with the text before that model call |
 * | `approval_requested` | `input_required` |
 * | `run_completed` | `answer` artifact (whole) + `completed` |
 * | `run_failed` | `failed` |
 * | `run_cancelled` | `canceled` |
 * | `run_stream_end {status}` | the terminal state of `status` when none came before |
 */

/** What the gateway keeps in `task.metadata.kova`. */
export interface KovaTaskMeta {
  agentId: string;
  sessionId: string;
  runId: string;
  owner: string;
  /** The id of the message that started the run (what CancelTask interrupts); absent in tasks of older gateways. */
  messageId?: string;
  usage?: RunUsage;
  error?: { code: string; message: string };
}

/** The agent's reply to the message that started the run (`result_notify`), as the gateway reads it. */
export type RunOutcome = Pick<AgentResult, "status" | "output" | "usage" | "error">;

export const TERMINAL_STATES: readonly TaskState[] = [
  TaskState.TASK_STATE_COMPLETED,
  TaskState.TASK_STATE_FAILED,
  TaskState.TASK_STATE_CANCELED,
  TaskState.TASK_STATE_REJECTED,
];

export function isTerminal(state: TaskState | undefined): boolean {
  return state !== undefined && TERMINAL_STATES.includes(state);
}

export function textPart(text: string): Part {
  return { content: { $case: "text", value: text }, mediaType: "text/plain", filename: "", metadata: {} };
}

export function dataPart(value: unknown): Part {
  return { content: { $case: "data", value }, mediaType: "application/json", filename: "", metadata: {} };
}

/** The text of a message's text parts (data parts as JSON), joined by newlines. */
export function messageText(m: Message | undefined): string {
  const out: string[] = [];
  for (const p of m?.parts ?? []) {
    if (p.content?.$case === "text") out.push(p.content.value);
    else if (p.content?.$case === "data") out.push(JSON.stringify(p.content.value));
  }
  return out.join("\n");
}

export function agentMessage(task: Pick<Task, "id" | "contextId">, parts: Part[]): Message {
  return {
    messageId: randomUUID(),
    contextId: task.contextId,
    taskId: task.id,
    role: Role.ROLE_AGENT,
    parts,
    metadata: {},
    extensions: [],
    referenceTaskIds: [],
  };
}

export function kovaMeta(task: Task): KovaTaskMeta {
  return (task.metadata?.kova ?? {}) as KovaTaskMeta;
}

/** A new task for a run, `submitted`, with the caller's message as its history. */
export function newTask(opts: { taskId: string; contextId: string; message: Message; meta: KovaTaskMeta }): Task {
  return {
    id: opts.taskId,
    contextId: opts.contextId,
    status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: new Date().toISOString() },
    artifacts: [],
    history: [{ ...opts.message, taskId: opts.taskId, contextId: opts.contextId }],
    metadata: { kova: opts.meta },
  };
}

export function answerArtifactId(task: Task): string {
  return `${task.id}-answer`;
}

/** Folds a run's events into its task; each call returns the stream updates it caused. */
export class TaskProjection {
  /** Text streamed so far (tokens), replaced by the final output. */
  private streamed = "";
  /**
   * Where the current model call's text starts in `streamed`: a retried call (a cut
   * stream) drops only its own partial text, never what earlier calls of the run streamed.
   */
  private callStart = 0;
  /** Set by a state change not yet saved to the store. */
  dirty = false;

  constructor(readonly task: Task) {}

  get state(): TaskState {
    return this.task.status?.state ?? TaskState.TASK_STATE_UNSPECIFIED;
  }

  get terminal(): boolean {
    return isTerminal(this.state);
  }

  /** An A2A client stops listening here: a final state, or one that waits for the user. */
  get settled(): boolean {
    return this.terminal || this.state === TaskState.TASK_STATE_INPUT_REQUIRED;
  }

  private setState(state: TaskState, message?: Message): StreamResponse {
    this.task.status = { state, message, timestamp: new Date().toISOString() };
    this.dirty = true;
    return { payload: { $case: "statusUpdate", value: { taskId: this.task.id, contextId: this.task.contextId, status: this.task.status, metadata: {} } } };
  }

  private meta(): KovaTaskMeta {
    const m = kovaMeta(this.task);
    this.task.metadata = { ...this.task.metadata, kova: m };
    return m;
  }

  /** Applies one event of the run; events after a terminal state change nothing. */
  apply(event: KovaEvent): StreamResponse[] {
    if (this.terminal) return [];
    const data = (event.data ?? {}) as Record<string, unknown>;
    const out: StreamResponse[] = [];
    const working = () => {
      if (this.state !== TaskState.TASK_STATE_WORKING) out.push(this.setState(TaskState.TASK_STATE_WORKING));
    };
    switch (event.type) {
      case "run_started":
        working();
        break;
      case "model_delta": {
        working();
        // A cut stream being retried (docs/protocol.md): what this call streamed so far is
        // void. A non-append update replaces the answer with the text of earlier calls.
        if (data.restart !== undefined && this.streamed.length > this.callStart) {
          this.streamed = this.streamed.slice(0, this.callStart);
          out.push(this.answerChunk(this.streamed, false));
        }
        const text = typeof data.text === "string" ? data.text : "";
        if (text.length === 0) break;
        const first = this.streamed.length === 0;
        this.streamed += text;
        out.push(this.answerChunk(text, !first));
        break;
      }
      case "model_response": {
        this.callStart = this.streamed.length;
        const usage = reportedUsage(data.usage);
        if (usage) {
          // The call's cost is beside its usage, not in it (docs/protocol.md, "Agent runs").
          const call: RunUsage = { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens };
          if (typeof data.costUsd === "number") call.costUsd = data.costUsd;
          const m = this.meta();
          m.usage = addUsage(m.usage ?? ZERO_USAGE, call);
        }
        break;
      }
      case "tool_call":
      case "tool_result": {
        const what =
          event.type === "tool_call" ? `calling tool ${String(data.tool)}` : `tool ${String(data.tool)} ${data.ok === false ? "failed" : "returned"}`;
        out.push(
          this.setState(
            TaskState.TASK_STATE_WORKING,
            agentMessage(this.task, [textPart(what), dataPart({ kovaEvent: event.type, ...(publicEventData(data) as Record<string, unknown>) })]),
          ),
        );
        break;
      }
      case "approval_requested":
        out.push(
          this.setState(
            TaskState.TASK_STATE_INPUT_REQUIRED,
            agentMessage(this.task, [
              textPart(`approval needed${data.tool ? ` for tool ${String(data.tool)}` : ""}`),
              dataPart({ kovaEvent: event.type, ...data }),
            ]),
          ),
        );
        break;
      case "run_completed":
        out.push(
          ...this.finish({
            status: "completed",
            output: typeof data.output === "string" ? data.output : JSON.stringify(data.output ?? ""),
            usage: reportedUsage(data.usage) ?? this.meta().usage ?? zeroUsage(),
          }),
        );
        break;
      case "run_failed":
        out.push(
          ...this.finish({
            status: "failed",
            output: "",
            usage: reportedUsage(data.usage) ?? this.meta().usage ?? zeroUsage(),
            error: data.error as RunOutcome["error"],
          }),
        );
        break;
      case "run_cancelled":
        out.push(...this.finish({ status: "cancelled", output: "", usage: reportedUsage(data.usage) ?? this.meta().usage ?? zeroUsage() }));
        break;
      case "run_stream_end": {
        const status = isRunStatus(data.status) ? data.status : "failed";
        out.push(...this.finish({ status, output: this.streamed, usage: this.meta().usage ?? zeroUsage() }));
        break;
      }
      default:
        // child_run_linked and events of newer agents: recorded by the run tree, not the task.
        if (this.state === TaskState.TASK_STATE_INPUT_REQUIRED) working();
    }
    return out;
  }

  /** A streamed piece of the answer: appended to it, or (`append` false) replacing it. */
  private answerChunk(text: string, append: boolean): StreamResponse {
    return {
      payload: {
        $case: "artifactUpdate",
        value: {
          taskId: this.task.id,
          contextId: this.task.contextId,
          artifact: { artifactId: answerArtifactId(this.task), name: "answer", description: "", parts: [textPart(text)], metadata: {}, extensions: [] },
          append,
          lastChunk: false,
          metadata: {},
        },
      },
    };
  }

  /** Ends the task from the agent's reply (or the events' terminal event). */
  finish(outcome: RunOutcome): StreamResponse[] {
    if (this.terminal) return [];
    const m = this.meta();
    m.usage = outcome.usage;
    const out: StreamResponse[] = [];
    if (outcome.status === "completed") {
      const artifact = {
        artifactId: answerArtifactId(this.task),
        name: "answer",
        description: "",
        parts: [textPart(outcome.output)],
        metadata: {},
        extensions: [],
      };
      this.task.artifacts = [artifact];
      out.push({
        payload: {
          $case: "artifactUpdate",
          value: { taskId: this.task.id, contextId: this.task.contextId, artifact, append: false, lastChunk: true, metadata: {} },
        },
      });
      out.push(this.setState(TaskState.TASK_STATE_COMPLETED, agentMessage(this.task, [textPart(outcome.output)])));
    } else if (outcome.status === "cancelled") {
      out.push(this.setState(TaskState.TASK_STATE_CANCELED, agentMessage(this.task, [textPart("the run was cancelled")])));
    } else {
      // What the task's reader sees (A2A status, the OpenAI stream's error): code and fix, no internals.
      m.error = publicError(outcome.error, { code: "RUN_FAILED", message: "the run failed" });
      out.push(this.setState(TaskState.TASK_STATE_FAILED, agentMessage(this.task, [textPart(`${m.error.code}: ${m.error.message}`)])));
    }
    return out;
  }
}

export function zeroUsage(): RunUsage {
  return { ...ZERO_USAGE };
}
