import {
  type AgentCard,
  type CancelTaskRequest,
  type DeleteTaskPushNotificationConfigRequest,
  type GetExtendedAgentCardRequest,
  type GetTaskPushNotificationConfigRequest,
  type GetTaskRequest,
  type ListTaskPushNotificationConfigsRequest,
  type ListTaskPushNotificationConfigsResponse,
  type ListTasksRequest,
  type ListTasksResponse,
  type Message,
  type SendMessageRequest,
  type StreamResponse,
  type SubscribeToTaskRequest,
  type Task,
  type TaskPushNotificationConfig,
  TaskState,
} from "@a2a-js/sdk";
import type { A2ARequestHandler, ServerCallContext, User } from "@a2a-js/sdk/server";
import {
  ContentTypeNotSupportedError,
  PushNotificationNotSupportedError,
  RequestMalformedError,
  TaskNotCancelableError,
  TaskNotFoundError,
  UnsupportedOperationError,
} from "@a2a-js/sdk/errors";
import { isValidId, newId, publicText, type Logger } from "../core/index.js";
import { newRunId, resolveAgent, type Principal } from "./auth.js";
import type { GatewayHttpError } from "./errors.js";
import type { RunTicket } from "./quotas.js";
import type { SignalReply } from "../cluster/index.js";
import type { RunClient } from "./runs.js";
import { type NatsTaskStore, ownerOf } from "./task-store.js";
import { isTerminal, kovaMeta, messageText, newTask, type KovaTaskMeta } from "./task-projection.js";
import { FOLLOW_AFTER_MS, type LiveTask, type TaskTracker } from "./task-tracker.js";
import { endUserOf, scopedSessionId } from "./sessions.js";

/**
 * The A2A `User` of a request: the API key that authenticated it, and the run its request
 * was admitted for under the key's quotas (gateway.ts admits a send before the JSON-RPC
 * layer, so that a key past a quota gets HTTP 429), taken by the run it starts.
 */
export class KeyUser implements User {
  constructor(
    readonly principal: Principal,
    private readonly authenticated: boolean,
    private readonly admitted?: { ticket?: RunTicket | undefined },
  ) {}
  get isAuthenticated(): boolean {
    return this.authenticated;
  }
  get userName(): string {
    return this.principal.name;
  }
  /** The admitted run's ticket, once (the caller then ends it). */
  takeTicket(): RunTicket | undefined {
    const t = this.admitted?.ticket;
    if (this.admitted) this.admitted.ticket = undefined;
    return t;
  }
}

export interface A2AHandlerDeps {
  runs: RunClient;
  store: NatsTaskStore;
  tracker: TaskTracker;
  taskTimeoutMs: number;
  log: Logger;
  /** The card this handler serves. */
  card: () => Promise<AgentCard>;
}

/** How long a get or subscribe waits for a replica to replay a running task's events. */
const CATCH_UP_MS = 3000;
/** How long a cancel waits for the interrupted run to end. */
const CANCEL_WAIT_MS = 10_000;

/**
 * Kova's A2A request handler, behind the SDK's JSON-RPC transport (which parses, validates,
 * answers v0.3 method names and streams SSE). It replaces the SDK's DefaultRequestHandler
 * because that one keeps a task's live state in the process that runs its executor: here
 * a task is a Kova run, whose events live on NATS, so any replica can stream, get or
 * cancel any task, and a task outlives the gateway that started it.
 *
 * `agentId` fixes the agent (`/agents/<id>/a2a/jsonrpc`); without it (`/a2a/jsonrpc`)
 * a message names its agent in `metadata.agent`.
 */
export class KovaA2AHandler implements A2ARequestHandler {
  constructor(
    private readonly deps: A2AHandlerDeps,
    private readonly agentId?: string,
  ) {}

  getAgentCard(): Promise<AgentCard> {
    return this.deps.card();
  }

  async getAuthenticatedExtendedAgentCard(_params: GetExtendedAgentCardRequest, _context: ServerCallContext): Promise<AgentCard> {
    throw new UnsupportedOperationError("Kova agents have no extended agent card: the public card is complete");
  }

  async sendMessage(params: SendMessageRequest, context: ServerCallContext): Promise<Message | Task> {
    const immediately = params.configuration?.returnImmediately === true;
    // A blocking send is answered from the run's reply; its events are read only if the run takes a while.
    const live = await this.start(params, context, immediately ? "now" : FOLLOW_AFTER_MS);
    if (immediately) return withHistory(structuredClone(live.task), params.configuration?.historyLength);
    await settled(live);
    return withHistory(structuredClone(live.task), params.configuration?.historyLength);
  }

  async *sendMessageStream(params: SendMessageRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    const live = await this.start(params, context, "now");
    // Listen before yielding the snapshot: nothing that happens meanwhile is lost.
    const updates = live.updates();
    yield { payload: { $case: "task", value: structuredClone(live.task) } };
    yield* updates;
  }

  async getTask(params: GetTaskRequest, context: ServerCallContext): Promise<Task> {
    const task = await this.current(params.id, context);
    return withHistory(task, params.historyLength);
  }

  listTasks(params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    const pageSize = params.pageSize ?? 50;
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 100) throw new RequestMalformedError("pageSize must be between 1 and 100");
    return this.deps.store.list({ ...params, pageSize }, context).then((r) => ({ ...r, tasks: r.tasks.map((t) => withHistory(t, params.historyLength)) }));
  }

  /**
   * Interrupts the task's run (the node's `interrupt` signal naming the run's message) and
   * waits for it to end. A task still queued behind the agent's other messages is canceled
   * at once: the agent's host cuts that message's turn as it starts (docs/gateway.md).
   */
  async cancelTask(params: CancelTaskRequest, context: ServerCallContext): Promise<Task> {
    const stored = await this.load(params.id, context);
    if (stored.status?.state === TaskState.TASK_STATE_CANCELED) return stored;
    if (isTerminal(stored.status?.state)) throw new TaskNotCancelableError(`task ${params.id} has already ended (${TaskState[stored.status!.state]})`);
    const live = this.deps.tracker.watch(stored);
    await live.whenCaughtUp(CATCH_UP_MS);
    if (!live.projection.terminal) {
      const { agentId, messageId } = kovaMeta(stored);
      // Without the message's id the signal would cut whatever the agent runs now: maybe another key's turn.
      if (!messageId)
        throw new TaskNotCancelableError(`task ${params.id} was started by an older gateway that did not record its message id: it cannot be cancelled safely`);
      const interrupt = () => this.deps.runs.interrupt(agentId, messageId);
      let reply: SignalReply;
      try {
        reply = await interrupt();
      } catch (err) {
        throw new TaskNotCancelableError({
          message: `could not interrupt agent ${agentId}: ${publicText(err instanceof Error ? err.message : String(err))}: try again`,
          cause: err,
        });
      }
      if (await this.stillQueued(live, reply)) await live.cancelQueued(interrupt);
      else await Promise.race([live.done, new Promise((r) => setTimeout(r, CANCEL_WAIT_MS))]);
    }
    if (live.projection.state !== TaskState.TASK_STATE_CANCELED) {
      throw new TaskNotCancelableError(`task ${params.id} ended ${TaskState[live.projection.state]} before the interrupt took effect`);
    }
    return structuredClone(live.task);
  }

  async *resubscribe(params: SubscribeToTaskRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    const stored = await this.load(params.id, context);
    if (isTerminal(stored.status?.state))
      throw new UnsupportedOperationError(`task ${params.id} has ended (${TaskState[stored.status!.state]}): get it with GetTask`);
    const live = this.deps.tracker.watch(stored);
    await live.whenCaughtUp(CATCH_UP_MS);
    const updates = live.updates();
    yield { payload: { $case: "task", value: structuredClone(live.task) } };
    if (live.projection.terminal) return;
    yield* updates;
  }

  async createTaskPushNotificationConfig(_p: TaskPushNotificationConfig, _c: ServerCallContext): Promise<TaskPushNotificationConfig> {
    throw new PushNotificationNotSupportedError();
  }
  async getTaskPushNotificationConfig(_p: GetTaskPushNotificationConfigRequest, _c: ServerCallContext): Promise<TaskPushNotificationConfig> {
    throw new PushNotificationNotSupportedError();
  }
  async listTaskPushNotificationConfigs(_p: ListTaskPushNotificationConfigsRequest, _c: ServerCallContext): Promise<ListTaskPushNotificationConfigsResponse> {
    throw new PushNotificationNotSupportedError();
  }
  async deleteTaskPushNotificationConfig(_p: DeleteTaskPushNotificationConfigRequest, _c: ServerCallContext): Promise<void> {
    throw new PushNotificationNotSupportedError();
  }

  /**
   * Whether the run had not started when the interrupt reached its agent's host: the host
   * was running another message (`when_started`), and the run has no event this replica
   * has not read, none of them a start (a replay still behind may not have read it yet).
   */
  private async stillQueued(live: LiveTask, reply: SignalReply): Promise<boolean> {
    if (reply.interrupted !== "when_started" || live.projection.state !== TaskState.TASK_STATE_SUBMITTED) return false;
    const { sessionId, runId } = kovaMeta(live.task);
    const last = await this.deps.runs.lastSeq(sessionId, runId).catch(() => Number.MAX_SAFE_INTEGER);
    return last <= live.position;
  }

  /** The stored task, or (while it runs) the watched one, replayed up to now. */
  private async current(taskId: string, context: ServerCallContext): Promise<Task> {
    const stored = await this.load(taskId, context);
    if (isTerminal(stored.status?.state)) return stored;
    const live = this.deps.tracker.watch(stored);
    await live.whenCaughtUp(CATCH_UP_MS);
    return structuredClone(live.task);
  }

  /** @throws TaskNotFoundError for an unknown task or one another key created */
  private async load(taskId: string, context: ServerCallContext): Promise<Task> {
    if (typeof taskId !== "string" || taskId.trim() === "") throw new RequestMalformedError("the task id is required");
    const t = await this.deps.store.load(taskId, context);
    if (!t) throw new TaskNotFoundError(`task not found: ${taskId}`);
    return t;
  }

  private async start(params: SendMessageRequest, context: ServerCallContext, follow: "now" | number): Promise<LiveTask> {
    const message = params.message;
    if (!message?.messageId) throw new RequestMalformedError("message.messageId is required");
    if (message.taskId) {
      const existing = await this.deps.store.load(message.taskId, context);
      if (!existing) throw new TaskNotFoundError(`task not found: ${message.taskId}`);
      throw new UnsupportedOperationError(
        `task ${message.taskId} takes no further messages: a Kova run takes one input. Send a new message with contextId ${existing.contextId} to continue the conversation`,
      );
    }
    for (const p of message.parts ?? []) {
      if (p.content?.$case !== "text" && p.content?.$case !== "data") {
        throw new ContentTypeNotSupportedError("Kova agents take text and data parts; send files as URLs in text");
      }
    }
    const input = messageText(message);
    if (input.trim() === "") throw new RequestMalformedError("the message has no text: send at least one text part");
    const keyUser = context.user as KeyUser | undefined;
    const principal = keyUser?.principal;
    // Admitted under the key's quotas before the JSON-RPC layer (gateway.ts); ended with the run.
    const ticket = keyUser?.takeTicket();
    let agentId: string;
    let sessionId: string;
    try {
      // The SDK maps A2A errors only: an agent the key may not use is answered as one that
      // does not exist (the /agents/<id> endpoint answers HTTP 404 before the JSON-RPC layer).
      agentId = resolveAgent(principal, this.agentId ?? agentFromMetadata(message, params), this.deps.runs.cluster);
      await this.deps.runs.ready(agentId);
      // Scoped by the key: two keys naming one context do not share the agent's memory of it.
      sessionId = scopedSessionId(message.contextId || newId(), principal?.sessionScope);
    } catch (err) {
      ticket?.end();
      if (err instanceof RequestMalformedError) throw err;
      throw new RequestMalformedError({ message: (err as GatewayHttpError).message, cause: err });
    }
    const contextId = message.contextId || sessionId;
    const runId = newRunId(principal);
    const meta: KovaTaskMeta = { agentId, sessionId, runId, owner: ownerOf(context), messageId: newId() };
    const task = newTask({ taskId: runId, contextId, message, meta });
    const user = endUserOf(principal, undefined);
    let revision: number;
    try {
      revision = await this.deps.store.put(task, context);
    } catch (err) {
      ticket?.end();
      throw err;
    }
    this.deps.log.debug({ taskId: runId, agentId }, "a2a task started");
    return this.deps.tracker.start(
      task,
      {
        agentId,
        // A client-chosen context is a conversation: the agent keeps its memory per session.
        kind: message.contextId ? "agent.chat" : "task_delegate",
        input,
        sessionId: meta.sessionId,
        runId,
        messageId: meta.messageId!,
        timeoutMs: this.deps.taskTimeoutMs,
        ...(user ? { constraints: { user } } : {}),
        ...(ticket ? { quota: ticket } : {}),
      },
      { follow, revision },
    );
  }
}

function agentFromMetadata(message: Message, params: SendMessageRequest): string {
  const a = message.metadata?.agent ?? params.metadata?.agent;
  if (!isValidId(a))
    throw new RequestMalformedError(
      'name the agent in message.metadata.agent (e.g. {"agent": "researcher"}), or use the agent\'s own endpoint /agents/<id>/a2a/jsonrpc',
    );
  return a;
}

function settled(live: LiveTask): Promise<void> {
  if (live.projection.settled) return Promise.resolve();
  return new Promise((resolve) => {
    const off = live.listen((u) => {
      if (u === undefined || live.projection.settled) {
        off();
        resolve();
      }
    });
  });
}

/** A2A's historyLength: undefined keeps all, 0 none, N the newest N. */
function withHistory(task: Task, historyLength: number | undefined): Task {
  if (historyLength === undefined || historyLength === null) return task;
  task.history = historyLength <= 0 ? [] : task.history.slice(-historyLength);
  return task;
}
