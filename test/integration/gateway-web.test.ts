import { describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, copyFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { KovaClient } from "../../src/bus/index.js";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";

// Children of the coordinator: the researcher calls the add tool once, the writer answers at once.
const handler: ScriptedHandler = (r) => {
  const last = r.lastMessage;
  if (last?.role === "tool") return scriptedReply.text("found 5 facts", { usage: { inputTokens: 40, outputTokens: 8 } });
  const text = String(last?.content ?? "");
  if (text.includes("researcher"))
    return scriptedReply.toolCalls([{ name: "add", arguments: { a: 2, b: 3 } }], { usage: { inputTokens: 25, outputTokens: 5 } });
  return scriptedReply.text("a short essay", { usage: { inputTokens: 12, outputTokens: 30 } });
};

describe("gateway: web view", () => {
  it("web - the page shows nodes, agents and DLQ counts, and a swarm's run tree as it grows (real headless chromium)", async () => {
    await using rig = await startGatewayRig({ handler, agents: ["researcher", "writer"] });
    const unauth = await fetch(`${rig.url}/ui`);
    expect(unauth.status).toBe(401);

    const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
    await using _browser = defer(() => browser.close());
    const context = await browser.newContext({ extraHTTPHeaders: { authorization: `Bearer ${rig.key}` }, viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    const session = "swarm-1";
    await page.goto(`${rig.url}/ui#${session}`);
    // the cluster tables fill from /ui/api/cluster
    await page
      .locator("#nodes tbody tr", { hasText: "n1" })
      .waitFor({ timeout: 20_000 })
      .catch(async (err: unknown) => {
        throw new Error(
          `nodes table empty; status ${await page.locator("#status").textContent()}; api: ${await page.evaluate(() => fetch("/ui/api/cluster").then(async (r) => `${r.status} ${(await r.text()).slice(0, 300)}`))}`,
          { cause: err },
        );
      });
    await page.locator("#agents tbody tr", { hasText: "researcher" }).waitFor();
    expect(await page.locator("#nodes tbody tr").first().textContent()).toContain("up");
    expect(await page.locator("#dlq tbody").textContent()).toContain("none");

    // a swarm: the coordinator starts one child run per agent in the session the page watches
    await using client = await KovaClient.connect({ servers: rig.nats.url, cluster: rig.cluster });
    await client.send("coordinator", "task_delegate", { input: "write about NATS", sessionId: session, runId: "root-run", children: ["researcher", "writer"] });

    const root = page.locator('.run[data-run-id="root-run"]');
    await root.waitFor({ timeout: 20_000 });
    // the children are drawn nested under the root, and finish completed with their tools and tokens
    const children = page.locator('li:has(> .run[data-run-id="root-run"]) > ul.children > li > .run');
    await expect.poll(() => children.count(), { timeout: 20_000 }).toBe(2);
    await expect
      .poll(async () => (await children.evaluateAll((els) => els.map((e) => `${e.getAttribute("data-agent")}:${e.getAttribute("data-status")}`))).sort(), {
        timeout: 20_000,
      })
      .toEqual(["researcher:completed", "writer:completed"]);
    const researcher = page.locator('.run[data-agent="researcher"]');
    expect(await researcher.textContent()).toMatch(/tools: add ✓/);
    expect(await researcher.textContent()).toMatch(/tokens 65 in \/ 13 out/);
    expect(await page.locator('.run[data-agent="writer"]').textContent()).toContain("model scripted-model");
    expect(await root.getAttribute("data-status")).toBe("completed");
    await page.locator("#session-status", { hasText: "(live)" }).waitFor();
    // usage per agent shows in the agents table (from the agents' info_request)
    await expect.poll(async () => page.locator("#agents tbody tr", { hasText: "researcher" }).textContent(), { timeout: 10_000 }).toMatch(/65 \/ 13/);

    const dir = await mkdtemp(join(tmpdir(), "kova-web-"));
    await using _dir = defer(() => rm(dir, { recursive: true, force: true }));
    const shot = join(dir, "web-view.png");
    await page.screenshot({ path: shot, fullPage: true });
    const png = await readFile(shot);
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    if (process.env.KOVA_SCREENSHOT) await copyFile(shot, process.env.KOVA_SCREENSHOT);

    // a browser without the header is sent to the login page, whose cookie opens the view
    const plain = await browser.newContext();
    const p2 = await plain.newPage();
    await p2.goto(`${rig.url}/ui`);
    expect(new URL(p2.url()).pathname).toBe("/ui/login");
    await p2.fill("#k", rig.key);
    await p2.click("button");
    await p2.locator("#nodes tbody tr", { hasText: "n1" }).waitFor({ timeout: 20_000 });
    // the cookie is not a key for anything but the view's GETs
    const cookie = (await plain.cookies()).find((c) => c.name === "kova_key");
    expect(cookie?.sameSite).toBe("Strict");
    const viaCookie = await fetch(`${rig.url}/v1/models`, { headers: { cookie: `kova_key=${encodeURIComponent(rig.key)}` } });
    expect(viaCookie.status).toBe(401);
  }, 90_000);
});
