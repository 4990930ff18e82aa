import type { Command } from "commander";
import { pino } from "pino";
import { ArgumentError, KovaError, isKovaError, instanceId } from "../core/index.js";
import { CORE_MESSAGE_TYPES, KovaClient, isWellFormedType, knownDlqReasons, type MessageType, BusErrorCode } from "../bus/index.js";
// Defines the actor runtime's DLQ reasons, which `dlq ls --reason` lists beside the bus's.
import "../actors/index.js";
import { resolveTarget, targetOptions, type TargetOpts } from "./target.js";
import { print, table } from "./output.js";
import { askAgentCommand, eventProfile, failedAgentRun, profiled, registerUsage, type AgentAskOpts } from "./agent-commands.js";

type BusOpts = TargetOpts;

interface MessageOpts extends BusOpts {
  type?: string;
  payload?: string;
  from?: string;
  id?: string;
  timeout?: string;
  key?: string;
}

/**
 * A2A messaging from the command line: `kova send`, `kova ask`, `kova request`,
 * `kova events tail`, `kova dlq ls`. They speak the same wire format as any client
 * (docs/protocol.md), through KovaClient.
 */
export function register(program: Command): void {
  const common = targetOptions;
  const message = (cmd: Command) =>
    common(cmd)
      .requiredOption("-t, --type <type>", `message type: ${CORE_MESSAGE_TYPES.join(", ")}, or a namespaced type such as agent.chat`)
      .option("-p, --payload <json>", "payload as JSON", "null")
      .option("--from <id>", "sender id (default: kova-cli)")
      .option("--id <id>", "message id (default: a new UUID); resending the same id is stored once")
      .option("--key <key>", "address the instance <agentId>--<key> of template <agentId> (a virtual actor, activated on first use)")
      .option("--json", "print JSON");

  message(program.command("send <agentId>").description("durably send an A2A message to an agent's mailbox"))
    .option("--allow-unknown", "store the message even when no agent of that id is declared (yet)")
    .action((target: string, o: MessageOpts & { allowUnknown?: boolean }) =>
      withClient(o, async (client) => {
        const named = address(target, o.key);
        // A bus client's instance is its own: the check names the id to send to.
        const agentId = o.allowUnknown ? named : await refuseUnknownAgent(client, named);
        const r = await client.send(agentId, messageType(o.type ?? ""), payload(o.payload), { ...(o.id ? { id: o.id } : {}) });
        const subject = client.bus.subjects.a2a(agentId);
        if (o.json) return print({ ...r, subject });
        process.stdout.write(`sent ${r.id} to ${subject} (stream seq ${r.seq}${r.duplicate ? ", duplicate: already stored" : ""})\n`);
      }),
    );

  common(
    program
      .command("ask <agentId> [text...]")
      .description('ask an agent: `kova ask researcher "What changed?"` streams the answer; with --type, send any message and print the result_notify'),
  )
    .option("-t, --type <type>", `message type (${CORE_MESSAGE_TYPES.join(", ")}, or a namespaced one) for the raw form; omit it to ask an LLM agent`)
    .option("-p, --payload <json>", "payload as JSON (raw form)", "null")
    .option("--from <id>", "sender id (default: kova-cli)")
    .option("--id <id>", "message id (default: a new UUID); resending the same id is stored once")
    .option("--key <key>", "ask the instance <agentId>--<key> of template <agentId> (a virtual actor, activated on first use)")
    .option("--session <id>", "continue (and keep) this conversation")
    .option("--chat", "send agent.chat (needs --session) instead of task_delegate")
    .option("--max-tokens <n>", "constraints.max_tokens of the task")
    .option("--deadline <when>", 'constraints.deadline: "5min", milliseconds or an ISO date')
    .option("--priority <n>", 'constraints.priority: the run\'s model-call priority under scheduling = "priority" (-100..100, higher first)')
    .option("--for-user <id>", "constraints.user: the end user the run is for (its fair-share key and user_max_tokens group)")
    .option("-v, --verbose", "show tool calls on stderr")
    .option("--json", "print JSON")
    .option("--timeout <ms>", "how long to wait for the reply (default 600000 for a question to an agent, 120000 with --type)")
    .action((target: string, text: string[], o: MessageOpts & AgentAskOpts) =>
      withClient(o, async (client) => {
        const agentId = address(target, o.key);
        if (o.type === undefined) {
          if (text.length === 0)
            throw new ArgumentError("text", 'say what to ask: kova ask <agent> "your question" (or give --type and --payload for a raw message)');
          return askAgentCommand(client, agentId, text.join(" "), { ...o, timeout: String(positive(o.timeout ?? "600000", "--timeout")) });
        }
        const reply = await client.ask(agentId, messageType(o.type), payload(o.payload), {
          timeoutMs: positive(o.timeout ?? "120000", "--timeout"),
          ...(o.id ? { id: o.id } : {}),
        });
        print(o.json ? reply : reply.payload);
        // An agent answers a run that failed with a result, not an error: still a failure.
        const failed = failedAgentRun(reply.payload);
        if (failed) {
          process.stderr.write(`kova: run ${failed.runId} ${failed.status}${failed.error ? `: ${failed.error.message} [${failed.error.code}]` : ""}\n`);
          process.exitCode = 1;
        }
      }),
    );

  message(program.command("request <agentId>").description("fast request/reply to the node hosting the agent (info_request, capability_query)"))
    .option("--timeout <ms>", "how long to wait for the reply", "10000")
    .action((target: string, o: MessageOpts) =>
      withClient(o, async (client) => {
        print(await client.request(address(target, o.key), messageType(o.type ?? ""), payload(o.payload), { timeoutMs: positive(o.timeout, "--timeout") }));
      }),
    );

  const events = program.command("events").description("cluster events");
  common(events.command("tail").description("print live events as JSON lines until interrupted"))
    .option("--session <id>", "only this session's events")
    .option("--max <n>", "exit after this many events")
    .option("--profile <profile>", "chat (tokens and answers), debug (everything) or metrics (usage only)")
    .option(
      "--tree",
      "render the session's run tree (parent and child runs, status, tokens, cost, duration) live instead of JSON lines; with --session it starts from the session's first event",
    )
    .option("--until-done", "with --tree: exit once every run of the tree has ended")
    .action((o: BusOpts & { session?: string; max?: string; profile?: string; tree?: boolean; untilDone?: boolean }) =>
      withClient(o, async (client) => {
        if (o.tree) {
          const { tailTree } = await import("./workflow-commands.js");
          return tailTree(client, o.session, { ...(o.max === undefined ? {} : { max: positive(o.max, "--max") }), untilDone: o.untilDone === true });
        }
        const max = o.max === undefined ? Infinity : positive(o.max, "--max");
        const profile = eventProfile(o.profile);
        const stream = client.events(o.session ? { sessionId: o.session } : {});
        const stop = () => stream.stop();
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
        await client.bus.nc.flush();
        process.stderr.write(`tailing ${o.session ? client.bus.subjects.sessionEvents(o.session) : client.bus.subjects.eventsWildcard}\n`);
        let n = 0;
        for await (const raw of stream) {
          const e = profiled(raw, profile);
          if (!e) continue;
          process.stdout.write(`${JSON.stringify(e)}\n`);
          if (++n >= max) break;
        }
        stream.stop();
      }),
    );

  const agents = program.commands.find((c) => c.name() === "agents") ?? program.command("agents").description("actors (agents) in the cluster");
  registerUsage(agents, (c) => common(c).option("--json", "print JSON"), withClient);

  const dlq = program.command("dlq").description("dead letters");
  common(dlq.command("ls").description("list the newest dead letters"))
    .option("--reason <reason>", `only this reason (${knownDlqReasons().join(", ")})`)
    .option("--limit <n>", "at most this many", "50")
    .option("--json", "print JSON (bodies base64)")
    .action((o: BusOpts & { reason?: string; limit: string }) =>
      withClient(o, async (client) => {
        const entries = await client.bus.listDlq({ limit: positive(o.limit, "--limit"), ...(o.reason ? { reason: o.reason } : {}) });
        if (o.json) return print(entries.map((e) => ({ ...e, data: Buffer.from(e.data).toString("base64") })));
        if (entries.length === 0) {
          process.stdout.write(`no dead letters in ${client.bus.subjects.streams.dlq}\n`);
          return;
        }
        const rows = entries.map((e) => [
          String(e.seq),
          e.time.toISOString(),
          e.reason,
          e.headers["Kova-Dlq-Agent"] ?? "-",
          String(e.data.length),
          (e.headers["Kova-Dlq-Error"] ?? "").slice(0, 80),
        ]);
        table(["SEQ", "TIME", "REASON", "AGENT", "BYTES", "ERROR"], rows);
      }),
    );
}

export async function withClient(o: BusOpts, fn: (client: KovaClient) => Promise<void>): Promise<void> {
  const { urls, cluster, security } = await resolveTarget(o);
  // Logs go to stderr so stdout stays machine-readable.
  const logger = pino({ level: process.env.KOVA_LOG_LEVEL ?? "warn" }, pino.destination(2));
  const client = await KovaClient.connect({
    servers: urls,
    cluster,
    id: "kova-cli",
    name: "kova-cli",
    logger,
    // Every role of deploy/nats/accounts.conf runs the CLI: a client or an operator may
    // not manage streams, and needs not (a node creates them).
    ensureStreams: "if-allowed",
    ...(security ? { security } : {}),
  });
  try {
    await fn(client);
  } finally {
    await client.close();
  }
}

/**
 * A send to an id nobody declared is stored anyway and waits, unanswered, until the
 * unknown-agent sweep moves it to the DLQ; for a typo the user wants to hear it now. An
 * instance id is activated instead; an unreadable registry lets the send go ahead.
 * @returns the id to send to (a bus client's instance: its own)
 * @throws KovaError UNKNOWN_AGENT saying how to check the id and how to send anyway
 */
async function refuseUnknownAgent(client: KovaClient, agentId: string): Promise<string> {
  try {
    return await client.bus.checkAgent(agentId);
  } catch (err) {
    if (!isKovaError(err, BusErrorCode.UNKNOWN_AGENT)) throw err;
    throw new KovaError(
      BusErrorCode.UNKNOWN_AGENT,
      `${err.message}; nothing was sent. To store it for an agent declared later, add --allow-unknown (it goes to the DLQ, reason unknown_agent, after [cluster] unknown_agent_after_ms)`,
      { cause: err, ...(err.data !== undefined ? { data: err.data } : {}) },
    );
  }
}

/** `<template> --key <k>` names the instance `<template>--<k>`; without --key the id as given. */
function address(target: string, key: string | undefined): string {
  return key === undefined ? target : instanceId(target, key);
}

function messageType(value: string): MessageType {
  if (!isWellFormedType(value)) {
    throw new KovaError(
      BusErrorCode.UNKNOWN_MESSAGE_TYPE,
      `--type ${JSON.stringify(value)} is not a message type: use one of ${CORE_MESSAGE_TYPES.join(", ")}, or a namespaced type such as agent.chat`,
    );
  }
  return value;
}

function payload(text: string | undefined): unknown {
  try {
    return JSON.parse(text ?? "null");
  } catch (err) {
    throw new ArgumentError("--payload", `is not valid JSON (${(err as Error).message}): quote it, e.g. --payload '{"topic":"nats"}'`);
  }
}

function positive(value: string | undefined, flag: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new ArgumentError(flag, `must be a positive number, got ${JSON.stringify(value)}`);
  return n;
}
