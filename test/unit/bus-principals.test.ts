import { headers } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { ownerScopeOf } from "../../src/core/principals.js";
import { createEnvelope } from "../../src/bus/envelope.js";
import { admitFromTenant, NotOwnedError, SenderIdentity, UnnamedSenderError, type BusPrincipal } from "../../src/bus/principals.js";

/** Headers as nats-server 2.9.10 delivers them: what the sender wrote first, the server's value last. */
function info(...values: Array<Record<string, unknown>>) {
  const h = headers();
  for (const v of values) h.append("Nats-Request-Info", JSON.stringify(v));
  return h;
}

describe("bus principals: who sent a message, and what it may name", () => {
  const senders = new SenderIdentity({ trustedAccounts: ["OPERATOR", "GATEWAY"] });

  it("principals - the sender is the server's (last) Nats-Request-Info: a forged value in front of it changes nothing; no header or a trusted account is trusted", () => {
    const bob = senders.of(info({ acc: "CLIENT", user: "bob" }))!;
    expect(bob).toMatchObject({ id: "nats:CLIENT:bob", user: "bob", inbox: "_INBOX_client.bob", scope: ownerScopeOf("nats:CLIENT:bob") });
    // bob wrote a header claiming to be the gateway: the server's value, last, says bob.
    expect(senders.of(info({ acc: "GATEWAY", user: "kova-gateway" }, { acc: "CLIENT", user: "bob" }))).toEqual(bob);
    // ... and claiming to be alice
    expect(senders.of(info({ acc: "CLIENT", user: "alice" }, { acc: "CLIENT", user: "bob" }))?.user).toBe("bob");
    expect(senders.of(undefined)).toBeUndefined();
    expect(senders.of(headers())).toBeUndefined();
    expect(senders.of(info({ acc: "GATEWAY", rtt: 1 }))).toBeUndefined();
    // A tenant account whose import does not share the user cannot be told apart: refused.
    expect(() => senders.of(info({ acc: "CLIENT", rtt: 1 }))).toThrow(UnnamedSenderError);
    // Default: no account is trusted.
    expect(new SenderIdentity().of(info({ acc: "GATEWAY", user: "kova-gateway" }))?.id).toBe("nats:GATEWAY:kova-gateway");
  });

  it("principals - a tenant's message: its sessions, runs, budget group and end user become its own; another's scope, another's instance or another inbox are refused", () => {
    const bob = senders.of(info({ acc: "CLIENT", user: "bob" })) as BusPrincipal;
    const alice = ownerScopeOf("key:alice");
    const env = (fields: Record<string, unknown>, to = "helper", replyTo: string | undefined = "_INBOX_client.bob.r1") =>
      createEnvelope({ from: "c", to, type: "agent.chat", payload: { message: "hi", ...fields }, ...(replyTo ? { replyTo } : {}) });
    const chat = admitFromTenant(env({ sessionId: "s1", constraints: { budget_group: "g", max_tokens: 5 } }), bob).payload as Record<string, any>;
    expect(chat).toMatchObject({
      message: "hi",
      sessionId: `${bob.scope}s1`,
      constraints: { budget_group: `${bob.scope}g`, user: bob.scope.slice(0, -1), max_tokens: 5 },
    });
    // A task without session or run gets a run of its own, the same for a redelivery of the message.
    const task = env({});
    expect((admitFromTenant(task, bob).payload as { runId: string }).runId).toBe((admitFromTenant(task, bob).payload as { runId: string }).runId);
    expect((admitFromTenant(task, bob).payload as { runId: string }).runId.startsWith(bob.scope)).toBe(true);
    expect(() => admitFromTenant(env({ sessionId: `${alice}s1` }), bob)).toThrow(NotOwnedError);
    expect(() => admitFromTenant(env({ runId: `${alice}r1` }), bob)).toThrow(NotOwnedError);
    expect(() => admitFromTenant(env({ constraints: { user: `${alice}u` } }), bob)).toThrow(NotOwnedError);
    expect(() => admitFromTenant(env({ sessionId: "s" }, `support--${alice}x`), bob)).toThrow(NotOwnedError);
    expect(() => admitFromTenant(env({ sessionId: "s" }, "support--x"), bob)).toThrow(NotOwnedError);
    expect(admitFromTenant(env({ sessionId: "s" }, `support--${bob.scope}x`), bob).to).toBe(`support--${bob.scope}x`);
    for (const replyTo of ["_INBOX_client.alice.r1", "_INBOX_gateway.x", "_INBOX_client.bobby.r1", "_INBOX_client.bob"]) {
      expect(() => admitFromTenant(env({ sessionId: "s" }, "helper", replyTo), bob), replyTo).toThrow(/replyTo/);
    }
  });
});
