import { describe, expect, it } from "vitest";
import { ConfigError } from "../../src/core/errors.js";
import { parseGatewayConfig } from "../../src/gateway/config.js";
import { Gateway } from "../../src/gateway/gateway.js";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";

const handler: ScriptedHandler = (r) => scriptedReply.text(`echo: ${String(r.lastMessage?.content ?? "")}`);

describe("gateway: keys, rates and auth = none", () => {
  it("auth - a key's own rate_per_minute is enforced, and every key has its own bucket", async () => {
    await using rig = await startGatewayRig({
      handler,
      gateway: { rate_per_minute: 100 },
      keys: { slow: { rate_per_minute: 2 }, alsoSlow: { rate_per_minute: 2 } },
    });
    const statuses = async (key: string, n: number) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) out.push((await fetch(`${rig.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status);
      return out;
    };
    // the key's own 2 a minute, not the gateway's 100
    expect(await statuses(rig.keys.slow!, 3)).toEqual([200, 200, 429]);
    // another key is not slowed by it: the gateway's rate, or its own 2
    expect(await statuses(rig.key, 5)).toEqual([200, 200, 200, 200, 200]);
    expect(await statuses(rig.keys.alsoSlow!, 3)).toEqual([200, 200, 429]);
    const limited = await fetch(`${rig.url}/v1/models`, { headers: { authorization: `Bearer ${rig.keys.slow!}` } });
    expect(limited.status).toBe(429);
    expect(await limited.json()).toMatchObject({ error: { code: "RATE_LIMITED", message: expect.stringContaining("key slow") } });
  }, 60_000);

  it('auth - with auth = "none" on loopback: no key needed, tasks belong to "anonymous", sessions are unscoped, cards declare no security; any other address is refused', async () => {
    await using rig = await startGatewayRig({ handler, gateway: { auth: "none" } });
    const models = await fetch(`${rig.url}/v1/models`);
    expect(models.status).toBe(200);

    // the card declares no scheme and requires none
    const card = (await (await fetch(`${rig.url}/agents/helper/.well-known/agent-card.json`, { headers: { "A2A-Version": "1.0" } })).json()) as Record<
      string,
      unknown
    >;
    expect(card.name).toBe("helper");
    expect(card.securitySchemes ?? {}).toEqual({});
    expect(card.securityRequirements ?? []).toEqual([]);

    // an A2A task without a key is the anonymous owner's, found again without a key
    const rpc = async (body: unknown) =>
      (await (
        await fetch(`${rig.url}/agents/helper/a2a/jsonrpc`, {
          method: "POST",
          headers: { "content-type": "application/json", "A2A-Version": "1.0" },
          body: JSON.stringify(body),
        })
      ).json()) as { result: Record<string, any> };
    const sent = await rpc({
      jsonrpc: "2.0",
      id: 1,
      method: "SendMessage",
      params: { message: { messageId: "m1", role: "ROLE_USER", parts: [{ text: "hi" }] } },
    });
    expect(sent.result.task).toMatchObject({ status: { state: "TASK_STATE_COMPLETED" }, metadata: { kova: { owner: "anonymous" } } });
    const listed = await rpc({ jsonrpc: "2.0", id: 2, method: "ListTasks", params: { pageSize: 10 } });
    expect(listed.result.tasks.map((t: { id: string }) => t.id)).toEqual([sent.result.task.id]);

    // a named session is the name itself: there is no key to scope it by
    const chat = await fetch(`${rig.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "helper", user: "alice", messages: [{ role: "user", content: "hello" }] }),
    });
    expect(chat.status).toBe(200);
    expect(chat.headers.get("x-kova-session-id")).toBe("alice");

    // not on an address other machines reach: neither in the config nor in a config built in code
    expect(() => parseGatewayConfig({ listen: "0.0.0.0:0", auth: "none" })).toThrow(ConfigError);
    const exposed = { ...parseGatewayConfig({ listen: "127.0.0.1:0", auth: "none" }), host: "0.0.0.0" };
    await expect(Gateway.start({ config: exposed, servers: rig.nats.url, cluster: rig.cluster })).rejects.toThrow(/only accepted on a loopback address/);
  }, 60_000);
});
