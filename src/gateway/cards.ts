import type { AgentCard, AgentInterface, AgentSkill, SecurityRequirement, SecurityScheme } from "@a2a-js/sdk";
import { duplicateInterfacesForLegacy } from "@a2a-js/sdk/compat/v0_3";
import { KOVA_VERSION } from "../core/index.js";
import type { AgentRecord } from "../cluster/index.js";

/**
 * Agent Cards. Each agent has its own (`/agents/<id>/.well-known/agent-card.json`), with
 * its JSON-RPC endpoint, its capabilities as skills and the bearer scheme the gateway
 * enforces; the gateway's own card (`/.well-known/agent-card.json`) is the directory:
 * one skill per agent, reachable through the shared endpoint with `metadata.agent`.
 * Both declare the v0.3 interface too, so v0.3 clients are served through the SDK's
 * compatibility layer.
 */
export interface CardOptions {
  baseUrl: string;
  auth: "keys" | "none";
}

const BEARER = "kovaApiKey";

function security(opts: CardOptions): { securitySchemes: Record<string, SecurityScheme>; securityRequirements: SecurityRequirement[] } {
  if (opts.auth === "none") return { securitySchemes: {}, securityRequirements: [] };
  return {
    securitySchemes: {
      [BEARER]: {
        scheme: {
          $case: "httpAuthSecurityScheme",
          value: {
            description: "A Kova gateway API key (kova gateway keys add <name>), sent as Authorization: Bearer <key>",
            scheme: "bearer",
            bearerFormat: "opaque",
          },
        },
      },
    },
    securityRequirements: [{ schemes: { [BEARER]: { list: [] } } }],
  };
}

function interfaces(url: string): AgentInterface[] {
  return duplicateInterfacesForLegacy([{ url, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "1.0" }], ["JSONRPC"]);
}

function base(name: string, description: string, url: string, opts: CardOptions, skills: AgentSkill[]): AgentCard {
  return {
    name,
    description,
    supportedInterfaces: interfaces(url),
    provider: { url: opts.baseUrl, organization: "Kova" },
    version: KOVA_VERSION,
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    ...security(opts),
    defaultInputModes: ["text/plain", "application/json"],
    defaultOutputModes: ["text/plain"],
    skills,
    signatures: [],
  };
}

function skill(id: string, name: string, description: string, tags: string[]): AgentSkill {
  return { id, name, description, tags, examples: [], inputModes: [], outputModes: [], securityRequirements: [] };
}

export function agentEndpoint(baseUrl: string, agentId: string): string {
  return `${baseUrl}/agents/${agentId}/a2a/jsonrpc`;
}

/** The card of one agent. */
export function agentCard(record: AgentRecord, opts: CardOptions): AgentCard {
  const caps = record.capabilities.length > 0 ? record.capabilities : [record.type];
  return base(
    record.id,
    `Kova agent ${record.id} (type ${record.type})`,
    agentEndpoint(opts.baseUrl, record.id),
    opts,
    caps.map((c) => skill(c, c, `${c}: a capability of agent ${record.id}`, [c, record.type])),
  );
}

/** The gateway's card: a directory of the agents the caller may use. */
export function directoryCard(records: AgentRecord[], opts: CardOptions): AgentCard {
  return base(
    "Kova gateway",
    `Kova agents behind one gateway. Each agent has its own card at ${opts.baseUrl}/agents/<id>/.well-known/agent-card.json; this endpoint takes messages for any of them with metadata.agent set to its id.`,
    `${opts.baseUrl}/a2a/jsonrpc`,
    opts,
    records.map((r) =>
      skill(
        r.id,
        r.id,
        `agent ${r.id} (type ${r.type}; capabilities: ${r.capabilities.join(", ") || "none"}); card: ${opts.baseUrl}/agents/${r.id}/.well-known/agent-card.json`,
        ["agent", ...r.capabilities],
      ),
    ),
  );
}
