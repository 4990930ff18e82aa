import type { Command } from "commander";
import { KovaError } from "../core/index.js";
import { BusErrorCode, type NatsConnection } from "../bus/index.js";
import { controlRequest, nodeSubject, readAgent, readNodes, type ToolsReply, type ToolView } from "../cluster/index.js";
import { withCluster } from "./cluster-commands.js";
import { print, table } from "./output.js";
import { targetOptions, type TargetOpts } from "./target.js";

/**
 * `kova tools ls [agent]`: what an agent can call (built-ins, code tools, MCP tools
 * `<server>/<tool>`, agents `agent:<id>`), each with its JSON schema, idempotency class and
 * whether a call waits for approval; without an agent, a node's whole registry. Asked of
 * the node that hosts the agent (else any live node) through its `tools` endpoint.
 */
export function register(program: Command): void {
  const tools = program.command("tools").description("tools agents can call");
  targetOptions(tools.command("ls [agent]").description("an agent's tools (schema, idempotency, approval), or a node's whole registry"))
    .option("--node <id>", "ask this node (default: the agent's host, else a live node)")
    .option("--json", "print JSON (full schemas)")
    .action((agent: string | undefined, o: TargetOpts & { node?: string; json?: boolean }) =>
      withCluster(o, async (nc, cluster) => {
        const node = o.node ?? (await pickNode(nc, cluster, agent));
        const reply = await controlRequest<ToolsReply>(nc, nodeSubject(cluster, node, "tools"), agent ? { agent } : {}, 30_000);
        if (o.json) return print(reply);
        if (reply.tools.length === 0) {
          process.stdout.write(agent ? `agent ${agent} has no tools\n` : `node ${reply.node} has no tool registry (it hosts no agents)\n`);
        } else {
          table(
            ["TOOL", "ARGUMENTS", "IDEMPOTENCY", "APPROVAL", "SOURCE", "DESCRIPTION"],
            reply.tools.map((t) => [t.name, signature(t), t.idempotency, t.requiresApproval ? "required" : "-", t.source, oneLine(t.description, 60)]),
          );
        }
        for (const t of reply.skipped ?? []) process.stdout.write(`not offered: ${t.name} (${t.source}): ${t.reason}\n`);
      }),
    );
}

/** The node to ask: the agent's host, else the first live node. */
async function pickNode(nc: NatsConnection, cluster: string, agent: string | undefined): Promise<string> {
  if (agent !== undefined) {
    const record = await readAgent(nc, cluster, agent);
    if (!record)
      throw new KovaError(BusErrorCode.UNKNOWN_AGENT, `no agent ${agent} in cluster ${cluster}: check the id with kova agents ls`, {
        data: { agentId: agent },
      });
    if (record.node) return record.node;
  }
  const now = Date.now();
  const live = (await readNodes(nc, cluster)).filter((n) => n.state === "up" && now - n.heartbeatAt < 15_000);
  if (live.length === 0) throw new KovaError(BusErrorCode.NO_RESPONDERS, `no live node in cluster ${cluster}: start one with kova node start`);
  return live[0]!.id;
}

/** `{expression: string, mode?: "a"|"b"}`: the top-level arguments of a JSON Schema, compactly. */
export function signature(t: Pick<ToolView, "parameters">): string {
  const props = (t.parameters.properties ?? {}) as Record<string, Record<string, unknown>>;
  const required = new Set((t.parameters.required ?? []) as string[]);
  const parts = Object.entries(props).map(([k, s]) => `${k}${required.has(k) ? "" : "?"}: ${typeName(s)}`);
  return `{${parts.join(", ")}}`;
}

function typeName(s: Record<string, unknown>): string {
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join("|");
  if (Array.isArray(s.type)) return s.type.join("|");
  if (s.type === "array" && typeof s.items === "object" && s.items !== null) return `${typeName(s.items as Record<string, unknown>)}[]`;
  return typeof s.type === "string" ? s.type : "any";
}

function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}
