import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ActorTypeRegistry, counterActor, type CounterState } from "../../src/actors/index.js";
import { KovaClient, securityOptions, type NatsSecurity } from "../../src/bus/index.js";
import { parseConfig } from "../../src/node/config.js";
import { KovaNode } from "../../src/node/node.js";
import type { NatsServerHandle } from "../../src/testing/index.js";
import { captureLogs } from "../fixtures/capture-logs.js";
import { tempDir, type TempDir } from "../fixtures/disposable.js";
import { poll } from "../fixtures/poll.js";
import { expectSubscriptionsRefused, natsToml, passwords, role, startAccountsServer } from "../fixtures/security/accounts.js";

// Two client services in the CLIENT account of deploy/nats/accounts.conf: kova-client as
// shipped, and billing, added as the file says (a copy of kova-client's block under its
// name). Each has its own reply inbox, so neither can read the other's replies.
const billing: NatsSecurity = { user: "billing", password: passwords.client, inboxPrefix: "_INBOX_client.billing" };

let server: NatsServerHandle;
let node: KovaNode;
let dir: TempDir;
const conns: NatsConnection[] = [];
const logs = captureLogs();

beforeAll(async () => {
  dir = await tempDir("kova-inboxes-");
  server = await startAccountsServer(dir.path, { clientUsers: ["billing"] });
  const config = parseConfig(
    `[node]\nid = "n1"\ndata_dir = "${join(dir.path, "node")}"\n[nats]\nurls = ["${server.url}"]\n${natsToml("node")}\n` +
      `[wal]\nsync = "normal"\n[[actors]]\nid = "c1"\ntype = "counter"\n`,
    { env: process.env },
  );
  node = await KovaNode.start({ config, logger: logs.logger, types: new ActorTypeRegistry([counterActor]) });
}, 60_000);

afterAll(async () => {
  for (const c of conns) await c.close().catch(() => undefined);
  await node?.stop();
  await server?.stop();
  await dir?.[Symbol.asyncDispose]();
});

describe("security: one reply inbox per client user (deploy/nats/accounts.conf)", () => {
  it("client inboxes - two client users both send and ask; neither may subscribe to the other's inbox, nor to the role's whole inbox space", async () => {
    let sent = 0;
    for (const security of [role("client"), billing]) {
      await using kc = await KovaClient.connect({ servers: server.url, security, ensureStreams: false });
      // A durable send (its JetStream ack comes to the user's inbox), then fast-path asks (the node's answers do).
      await kc.send("c1", "task_delegate", {});
      sent++;
      const state = await poll(
        async () => {
          const st = await kc.request<CounterState>("c1", "info_request", {});
          return st.count === sent ? st : undefined;
        },
        { timeoutMs: 20_000, retryErrors: true, what: `c1 to count ${security.user}'s message` },
      );
      expect(state.count, `${security.user}'s answer came to its own inbox`).toBe(sent);
    }
    const asClient = await connect({ servers: server.url, ...securityOptions(role("client")) });
    const asBilling = await connect({ servers: server.url, ...securityOptions(billing) });
    conns.push(asClient, asBilling);
    await expectSubscriptionsRefused(asBilling, ["_INBOX_client.kova-client.>", "_INBOX_client.>", "_INBOX_client.*.*", "_INBOX.>"]);
    await expectSubscriptionsRefused(asClient, ["_INBOX_client.billing.>", "_INBOX_client.>", "_INBOX_client.*.*", "_INBOX.>"]);
  }, 60_000);
});
