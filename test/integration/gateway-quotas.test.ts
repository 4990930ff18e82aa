import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { startGatewayRig, type GatewayRig } from "../fixtures/gateway/rig.js";
import { poll } from "../fixtures/poll.js";

/**
 * Quotas per principal (docs/security.md): a key past one gets 429 QUOTA_EXCEEDED naming
 * it, and no other key is affected. One rig for the file: each test uses keys of its own.
 */

/** Runs whose prompt says "hold" wait until `release()`; every reply reports 10 + 10 tokens. */
let held: Array<() => void> = [];
const handler: ScriptedHandler = async (r) => {
  const text = String(r.lastMessage?.content ?? "");
  if (text.includes("hold")) await new Promise<void>((resolve) => held.push(resolve));
  return scriptedReply.text(`echo: ${text}`, { usage: { inputTokens: 10, outputTokens: 10 } });
};
const release = () => {
  for (const r of held.splice(0)) r();
};

async function chat(rig: GatewayRig, key: string, body: Record<string, unknown>) {
  const res = await fetch(`${rig.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${rig.keys[key]}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], ...body }),
  });
  return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string; data?: { quota?: string } }; model?: string } };
}

describe("gateway: quotas per principal", () => {
  let rig: GatewayRig;
  beforeAll(async () => {
    rig = await startGatewayRig({
      handler,
      agents: ["helper"],
      templates: ["support"],
      keys: {
        greedy: { max_instances: 3 },
        modest: undefined,
        busy: { max_concurrent_runs: 2 },
        calm: undefined,
        thrifty: { tokens_per_minute: 30 },
        other: undefined,
      },
    });
  });
  afterAll(() => rig?.[Symbol.asyncDispose]());

  it("quotas - one key opening sessions until refused (429 max_instances) leaves another key able to open its own; the cluster's max_actors is not what stops it", async () => {
    const statuses: number[] = [];
    let refusal: Awaited<ReturnType<typeof chat>> | undefined;
    for (let i = 0; i < 6 && !refusal; i++) {
      const r = await chat(rig, "greedy", { model: "support", user: `s-${i}` });
      statuses.push(r.status);
      if (r.status !== 200) refusal = r;
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
    expect(refusal?.body.error).toMatchObject({ code: "QUOTA_EXCEEDED", data: { quota: "max_instances" } });
    expect(refusal?.body.error?.message).toContain("max_instances");
    // Its existing sessions still answer: the quota counts instances, not messages.
    expect((await chat(rig, "greedy", { model: "support", user: "s-0" })).status).toBe(200);
    // Another key opens its own sessions.
    for (const user of ["a", "b", "c", "d"]) expect((await chat(rig, "modest", { model: "support", user })).status).toBe(200);
    // The card route activates an instance too: refused the same way.
    const card = await fetch(`${rig.url}/agents/support--card/.well-known/agent-card.json`, { headers: { authorization: `Bearer ${rig.keys.greedy}` } });
    expect(card.status).toBe(429);
    expect(rig.node.agents().filter((a) => a.id.startsWith(`support--${rig.scope("greedy")}`))).toHaveLength(3);
  }, 60_000);

  it("quotas - max_concurrent_runs: a key with its runs going gets 429 naming the quota, on the OpenAI and A2A endpoints; another key's runs go on; once one ends, it runs again", async () => {
    held = [];
    const running = [
      chat(rig, "busy", { model: "support", user: "h1", messages: [{ role: "user", content: "hold 1" }] }),
      chat(rig, "busy", { model: "support", user: "h2", messages: [{ role: "user", content: "hold 2" }] }),
    ];
    await poll(() => held.length === 2, { timeoutMs: 10_000, what: "two held runs of key busy" });
    const third = await chat(rig, "busy", { model: "support", user: "h3" });
    expect(third.status).toBe(429);
    expect(third.body.error).toMatchObject({ code: "QUOTA_EXCEEDED", data: { quota: "max_concurrent_runs" } });
    const a2a = await fetch(`${rig.url}/agents/support--h3/a2a/jsonrpc`, {
      method: "POST",
      headers: { authorization: `Bearer ${rig.keys.busy}`, "content-type": "application/json", "A2A-Version": "1.0" },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "SendMessage",
        params: { message: { messageId: "q1", role: "ROLE_USER", parts: [{ text: "hi" }] } },
      }),
    });
    expect(a2a.status).toBe(429);
    expect(await a2a.json()).toMatchObject({ error: { code: "QUOTA_EXCEEDED", data: { quota: "max_concurrent_runs" } } });
    // Another key is not slowed by it.
    expect((await chat(rig, "calm", { model: "support", user: "h1" })).status).toBe(200);
    release();
    expect((await Promise.all(running)).map((r) => r.status)).toEqual([200, 200]);
    expect((await chat(rig, "busy", { model: "support", user: "h3" })).status).toBe(200);
  }, 60_000);

  it("quotas - tokens_per_minute: once a key's runs used its tokens, its next run gets 429 naming the quota with Retry-After; another key runs", async () => {
    // Each run uses 20 tokens: the second goes past 30, the third is refused.
    expect((await chat(rig, "thrifty", { model: "helper" })).status).toBe(200);
    expect((await chat(rig, "thrifty", { model: "helper" })).status).toBe(200);
    const res = await fetch(`${rig.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${rig.keys.thrifty}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "helper", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(await res.json()).toMatchObject({ error: { code: "QUOTA_EXCEEDED", data: { quota: "tokens_per_minute", limit: 30 } } });
    expect((await chat(rig, "other", { model: "helper" })).status).toBe(200);
  }, 60_000);
});
