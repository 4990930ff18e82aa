import { describe, expect, it } from "vitest";
import { isKovaError } from "../../src/core/errors.js";
import {
  InvalidEnvelopeError,
  UnknownMessageTypeError,
  createEnvelope,
  isWellFormedType,
  knownMessageTypes,
  registerMessageTypes,
  subjectsFor,
  validateEnvelope,
} from "../../src/bus/index.js";

const base = { id: "m1", from: "alice", to: "bob", type: "task_delegate", payload: { x: 1 } };

describe("bus envelope", () => {
  it("envelope - createEnvelope fills a fresh id and keeps optional fields", () => {
    const env = createEnvelope({
      from: "a",
      to: "b",
      type: "info_request",
      payload: null,
      correlationId: "c1",
      replyTo: "_INBOX.abc.1",
      deadline: 1_700_000_000_000,
      traceId: "00-abc-01",
    });
    expect(env.id).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(env).toMatchObject({
      from: "a",
      to: "b",
      type: "info_request",
      payload: null,
      correlationId: "c1",
      replyTo: "_INBOX.abc.1",
      deadline: 1_700_000_000_000,
      traceId: "00-abc-01",
    });
    expect(createEnvelope({ from: "a", to: "b", type: "info_request", payload: 1 }).id).not.toBe(env.id);
  });

  it.each([
    ["id", { ...base, id: "has.dot" }],
    ["id", { ...base, id: "" }],
    ["from", { ...base, from: "a b" }],
    ["to", { ...base, to: "*" }],
    ["type", { ...base, type: 7 }],
    ["payload", { id: "m1", from: "a", to: "b", type: "task_delegate" }],
    ["correlationId", { ...base, correlationId: "x>y" }],
    ["replyTo", { ...base, replyTo: "kova.*.x" }],
    ["deadline", { ...base, deadline: "tomorrow" }],
    ["deadline", { ...base, deadline: 1.5 }],
    ["traceId", { ...base, traceId: "" }],
    ["envelope", [1, 2]],
    ["envelope", "text"],
  ])("envelope - rejects a bad %s with INVALID_ENVELOPE naming the field", (field, value) => {
    let caught: unknown;
    try {
      validateEnvelope(value);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(InvalidEnvelopeError);
    expect((caught as InvalidEnvelopeError).field).toBe(field);
    expect(isKovaError(caught, "INVALID_ENVELOPE")).toBe(true);
  });

  it("envelope - an unknown type is UNKNOWN_MESSAGE_TYPE, not a schema error", () => {
    expect(() => validateEnvelope({ ...base, type: "launch" })).toThrow(UnknownMessageTypeError);
  });

  it("envelope - namespaced types: any well-formed one may be sent, only registered ones are taken", () => {
    registerMessageTypes("envelope test", "envtest.chat");
    expect(validateEnvelope({ ...base, type: "envtest.chat" }).type).toBe("envtest.chat");
    // Well-formed but registered by nothing in this process: sendable, not taken.
    expect(createEnvelope({ from: "a", to: "b", type: "envtest.never_registered", payload: null }).type).toBe("envtest.never_registered");
    expect(() => validateEnvelope({ ...base, type: "envtest.never_registered" })).toThrow(UnknownMessageTypeError);
    for (const bad of ["Agent.Chat", "agent.", ".chat", "agent..chat", "agent.chat>", "a b.c", `x.${"y".repeat(70)}`]) {
      expect(isWellFormedType(bad), bad).toBe(false);
      expect(() => createEnvelope({ from: "a", to: "b", type: bad as "x.y", payload: null }), bad).toThrow(UnknownMessageTypeError);
    }
    expect(() => registerMessageTypes("envelope test", "NotNamespaced")).toThrow(InvalidEnvelopeError);
    expect(knownMessageTypes()).toEqual(expect.arrayContaining(["task_delegate", "envtest.chat"]));
  });

  it("envelope - unknown extra fields are dropped so newer senders stay compatible", () => {
    const env = validateEnvelope({ ...base, futureField: 42 });
    expect(env).toEqual(base);
  });

  it("subjects - derive every name from the cluster and refuse tokens that would break a subject", () => {
    const s = subjectsFor("prod-1");
    expect(s.a2a("researcher")).toBe("kova.prod-1.a2a.researcher");
    expect(s.rpc("researcher")).toBe("kova.prod-1.rpc.researcher");
    expect(s.events("s1", "r1")).toBe("kova.prod-1.events.s1.r1");
    expect(s.sessionEvents("s1")).toBe("kova.prod-1.events.s1.*");
    expect(s.dlq("max_deliver")).toBe("kova.prod-1.dlq.max_deliver");
    expect(s.journal("researcher")).toBe("kova.prod-1.journal.researcher");
    expect(s.journalWildcard).toBe("kova.prod-1.journal.*");
    expect(s.streams).toEqual({
      a2a: "KOVA_PROD-1_A2A",
      events: "KOVA_PROD-1_EVENTS",
      dlq: "KOVA_PROD-1_DLQ",
      journal: "KOVA_PROD-1_JOURNAL",
      waits: "KOVA_PROD-1_WAITS",
    });
    // Every bucket of docs/architecture.md's table, by role, named once.
    expect(s.kv).toEqual({
      agents: "kova_prod-1_agents",
      nodes: "kova_prod-1_nodes",
      leases: "kova_prod-1_leases",
      checkpoints: "kova_prod-1_checkpoints",
      schedules: "kova_prod-1_schedules",
      approvals: "kova_prod-1_approvals",
      agentMemory: "kova_prod-1_agent_memory",
      agentSettings: "kova_prod-1_agent_settings",
      agentBudgets: "kova_prod-1_agent_budgets",
      workflowTimers: "kova_prod-1_workflow_timers",
      workflowWaits: "kova_prod-1_workflow_waits",
      gatewayKeys: "kova_prod-1_gateway_keys",
      gatewayTasks: "kova_prod-1_gateway_tasks",
      evals: "kova_prod-1_evals",
    });
    expect(s.consumer("researcher")).toBe("agent_researcher");
    expect(s.maxDeliveriesAdvisory).toBe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.KOVA_PROD-1_A2A.*");
    expect(() => subjectsFor("a.b")).toThrow(/cluster name/);
    expect(() => s.a2a("x.y")).toThrow(/agent id/);
    expect(() => s.a2a(">")).toThrow(/agent id/);
  });
});
