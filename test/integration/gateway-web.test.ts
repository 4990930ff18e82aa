import { describe, expect, it } from "vitest";
import { mkdtemp, readFile, rm, copyFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { connect, headers } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { KovaClient, type KovaEvent, bucketName } from "../../src/bus/index.js";
import { controlRequest, nodeSubject } from "../../src/cluster/control.js";
import { NODE_RECORD_VERSION, type NodeRecord } from "../../src/cluster/membership.js";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { isPlanRequest, isSynthesisRequest, swarmModel } from "../fixtures/swarm/helpers.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";
import { poll } from "../fixtures/poll.js";

// The swarm coordinator plans two subtasks and writes the answer (swarmModel); the
// researcher calls the calculator once, then its answer waits until the test lets it go
// (so the page can be read while the run is under way); the writer answers at once.
const swarm = swarmModel({
  plan: [
    { task: "find facts on NATS", capability: "research" },
    { task: "write about NATS", capability: "write" },
  ],
});
let researcherAsks!: () => void;
const researcherAsked = new Promise<void>((resolve) => (researcherAsks = resolve));
let releaseResearcher!: () => void;
const researcherReleased = new Promise<void>((resolve) => (releaseResearcher = resolve));
const handler: ScriptedHandler = async (r) => {
  if (isPlanRequest(r) || isSynthesisRequest(r)) return swarm(r);
  if (r.messages[0]?.content === "You research.") {
    if (r.lastMessage?.role === "tool") {
      researcherAsks();
      await researcherReleased;
      return scriptedReply.text("found 5 facts", { usage: { inputTokens: 40, outputTokens: 8 } });
    }
    return scriptedReply.toolCalls([{ name: "calculator", arguments: { expression: "2 + 3" } }], { usage: { inputTokens: 25, outputTokens: 5 } });
  }
  return scriptedReply.text("a short essay", { usage: { inputTokens: 12, outputTokens: 30 } });
};

describe("gateway: web view", () => {
  it("web - the page shows nodes with their heartbeat age, agents with backlog and usage, DLQ counts, and a real swarm's run tree as it grows with each run's tokens, cost and duration (real headless chromium)", async () => {
    // real agents and the swarm layer's coordinator (no test doubles)
    await using rig = await startGatewayRig({
      handler,
      agents: [],
      llmAgents: [
        { id: "researcher", system: "You research.", tools: ["calculator"], capabilities: ["research"] },
        { id: "writer", system: "You write.", capabilities: ["write"] },
      ],
      swarms: ["planner"],
    });
    const unauth = await fetch(`${rig.url}/ui`);
    expect(unauth.status).toBe(401);
    // Every /ui answer, the 401 included, forbids framing and any script or style but the gateway's own files.
    for (const res of [unauth, await fetch(`${rig.url}/ui`, { headers: { authorization: `Bearer ${rig.key}` } }), await fetch(`${rig.url}/ui/login`)]) {
      const csp = res.headers.get("content-security-policy") ?? "";
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain("script-src 'self'");
      expect(csp).not.toContain("unsafe-inline");
      expect(res.headers.get("x-frame-options")).toBe("DENY");
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    }
    // No inline script or style in the pages: each <script> has a src and no body, no <style>, no on* handler.
    for (const path of ["/ui", "/ui/login"]) {
      const html = await (await fetch(`${rig.url}${path}`, { headers: { authorization: `Bearer ${rig.key}` } })).text();
      expect(html).toMatch(/<script src="\/ui\/[a-z]+\.js" defer><\/script>/);
      expect(html.match(/<script[^>]*>[^<]+<\/script>/g) ?? []).toEqual([]);
      expect(html.match(/<script(?![^>]*\bsrc=)[^>]*>/g) ?? []).toEqual([]);
      expect(html).not.toMatch(/<style|\son[a-z]+=/i);
    }

    const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
    await using _browser = defer(() => browser.close());
    const context = await browser.newContext({ extraHTTPHeaders: { authorization: `Bearer ${rig.key}` }, viewport: { width: 1100, height: 900 } });
    const page = await context.newPage();
    // Anything the policy refuses shows as a console error: the page must cause none.
    const refusals: string[] = [];
    page.on("console", (m) => {
      if (m.text().includes("Content Security Policy")) refusals.push(m.text());
    });
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
    const n1 = await page.locator("#nodes tbody tr", { hasText: "n1" }).locator("td").allTextContents();
    expect(n1[1]).toBe("up");
    // a live node's heartbeat (every 250 ms here) is fresher than the 10 s after which the page calls a node silent
    expect(Number(n1[2]?.replace(/ s$/, ""))).toBeLessThan(10);
    expect(await page.locator("#dlq tbody").textContent()).toContain("none");

    // a swarm in the session the page watches: the coordinator plans, delegates a subtask to each agent, and answers
    await using client = await KovaClient.connect({ servers: rig.nats.url, cluster: rig.cluster });
    const events = client.events({ sessionId: session });
    const seen: KovaEvent[] = [];
    const collecting = (async () => {
      for await (const e of events) seen.push(e);
    })();
    await using _events = defer(async () => {
      events.stop();
      await collecting;
    });
    await using _gate = defer(() => releaseResearcher());
    await client.send("planner", "task_delegate", { input: "NATS in two parts", sessionId: session, runId: "root-run" });

    const root = page.locator('.run[data-run-id="root-run"]');
    await root.waitFor({ timeout: 20_000 });
    // while the researcher's answer is held, its run shows running with its first call's tokens
    // and cost: 25 input and 5 output tokens at 1 and 2 USD per million (the rig's price)
    await researcherAsked;
    const researcher = page.locator('.run[data-agent="researcher"]');
    await expect.poll(() => researcher.getAttribute("data-status"), { timeout: 20_000 }).toBe("running");
    await expect.poll(() => researcher.locator(".meta").textContent(), { timeout: 20_000 }).toMatch(/tokens 25 in \/ 5 out, \$0\.000035 · /);
    releaseResearcher();
    // the children are drawn nested under the root, and finish completed with their tools and tokens
    const children = page.locator('li:has(> .run[data-run-id="root-run"]) > ul.children > li > .run');
    await expect.poll(() => children.count(), { timeout: 20_000 }).toBe(2);
    await expect
      .poll(async () => (await children.evaluateAll((els) => els.map((e) => `${e.getAttribute("data-agent")}:${e.getAttribute("data-status")}`))).sort(), {
        timeout: 20_000,
      })
      .toEqual(["researcher:completed", "writer:completed"]);
    expect(await researcher.textContent()).toMatch(/tools: calculator ✓/);
    // the ended run: both calls' tokens and cost (0.000035 + 0.000056), and its duration from
    // its run_started to its run_completed
    const started = await poll(() => seen.find((e) => e.type === "run_started" && (e.data as { agentId?: string }).agentId === "researcher"), {
      timeoutMs: 10_000,
      what: "the researcher's run_started",
    });
    const completed = await poll(() => seen.find((e) => e.runId === started.runId && e.type === "run_completed"), {
      timeoutMs: 10_000,
      what: "the researcher's run_completed",
    });
    const duration = `${((completed.ts - started.ts) / 1000).toFixed(2)} s`;
    expect(await researcher.locator(".meta").textContent()).toContain(`tokens 65 in / 13 out, $0.000091 · ${duration}`);
    expect(await page.locator('.run[data-agent="writer"]').textContent()).toContain("model main");
    // the coordinator answers after its children: it still synthesizes with its model when they end
    await expect.poll(() => root.getAttribute("data-status"), { timeout: 20_000 }).toBe("completed");
    expect(await root.getAttribute("data-agent")).toBe("planner");
    await page.locator("#session-status", { hasText: "(live)" }).waitFor();
    // usage per agent shows in the agents table (from the agents' info_request)
    await expect
      .poll(async () => page.locator("#agents tbody tr", { hasText: "researcher" }).locator("td").last().textContent(), { timeout: 10_000 })
      .toBe("65 / 13 $0.000091");

    const dir = await mkdtemp(join(tmpdir(), "kova-web-"));
    await using _dir = defer(() => rm(dir, { recursive: true, force: true }));
    const shot = join(dir, "web-view.png");
    await page.screenshot({ path: shot, fullPage: true });
    const png = await readFile(shot);
    expect(png.subarray(1, 4).toString()).toBe("PNG");
    if (process.env.KOVA_SCREENSHOT) await copyFile(shot, process.env.KOVA_SCREENSHOT);

    // a message no agent can read goes to the DLQ, and the page counts it by reason
    const nc = await connect({ servers: rig.nats.url });
    await using _nc = defer(() => nc.close());
    const h = headers();
    h.set("Content-Type", "application/json");
    nc.publish(`kova.${rig.cluster}.a2a.writer`, "{not json", { headers: h });
    await nc.flush();
    await page.locator("#dlq tbody tr", { hasText: "invalid_json" }).waitFor({ timeout: 20_000 });
    // the row's cells: reason, count
    expect(await page.locator("#dlq tbody tr", { hasText: "invalid_json" }).locator("td").allTextContents()).toEqual(["invalid_json", "1"]);

    // an agent's backlog: three messages wait for the paused coordinator, then none once it runs them
    const signal = (s: "pause" | "resume") => controlRequest(client.bus.nc, nodeSubject(rig.cluster, "n1", "signal"), { actorId: "coordinator", signal: s });
    await signal("pause");
    for (let i = 0; i < 3; i++) await client.send("coordinator", "task_delegate", { input: `queued ${i}`, children: [] });
    const backlog = () => page.locator("#agents tbody tr", { hasText: "coordinator" }).locator("td").nth(4).textContent();
    await expect.poll(backlog, { timeout: 20_000 }).toBe("3");
    await signal("resume");
    await expect.poll(backlog, { timeout: 20_000 }).toBe("0");

    // a node's heartbeat age: a node last heard 90 s ago shows as silent, 90 s old (plus the
    // time the page took to show it)
    const written = Date.now();
    const ghost: NodeRecord = {
      v: NODE_RECORD_VERSION,
      id: "ghost",
      incarnation: "i1",
      // starting and knowing no type: no peer places an actor on it
      state: "starting",
      types: [],
      startedAt: written - 120_000,
      heartbeatAt: written - 90_000,
      version: "0.0.0",
      actors: 0,
      pid: 1,
      host: "gone",
    };
    const nodesKv = await new Kvm(nc).open(bucketName(rig.cluster, "nodes"));
    await nodesKv.put("ghost", JSON.stringify(ghost));
    const ghostRow = page.locator("#nodes tbody tr", { hasText: "ghost" });
    await ghostRow.waitFor({ timeout: 20_000 });
    const cells = await ghostRow.locator("td").allTextContents();
    const shownAge = Number(cells[2]?.replace(/ s$/, ""));
    expect(cells[1]).toBe("starting (silent)");
    expect(shownAge).toBeGreaterThanOrEqual(90);
    expect(shownAge).toBeLessThanOrEqual(90 + (Date.now() - written) / 1000 + 0.05);

    // a run's end event carries its totals, which replace the sums of its model_response
    // events (a memory summary's call publishes none); the duration runs to that event
    const t0 = Date.now();
    const publish = (type: string, data: unknown, ts: number) => client.bus.publishEvent({ type, sessionId: "ended-1", runId: "failed-run", ts, data });
    await publish("run_started", { agentId: "writer", input: "x", kind: "task" }, t0);
    await publish(
      "model_response",
      {
        agentId: "writer",
        model: "main",
        turn: 0,
        usage: { inputTokens: 25, outputTokens: 5 },
        costUsd: 0.000035,
        finishReason: "stop",
        attempts: 1,
        toolCalls: 0,
      },
      t0 + 400,
    );
    await publish(
      "run_failed",
      { agentId: "writer", error: { code: "MODEL_CALL_FAILED", message: "refused" }, usage: { inputTokens: 130, outputTokens: 15, costUsd: 0.00016 } },
      t0 + 1500,
    );
    // the page follows the session named in its address (a string: the test's types have no DOM)
    await page.evaluate('location.hash = "ended-1"');
    const failed = page.locator('.run[data-run-id="failed-run"]');
    await expect.poll(() => failed.getAttribute("data-status"), { timeout: 20_000 }).toBe("failed");
    expect(await failed.locator(".meta").textContent()).toBe("run failed-run · model main · tokens 130 in / 15 out, $0.00016 · 1.50 s · refused");

    expect(refusals).toEqual([]);

    // Another site cannot frame the view (clickjacking): the browser refuses to show it in an iframe.
    const framer = await context.newPage();
    const framerLog: string[] = [];
    framer.on("console", (m) => framerLog.push(m.text()));
    // setContent resolves on the framing page's load, which waits for its iframe's.
    await framer.setContent(`<iframe id="f" src="${rig.url}/ui"></iframe>`);
    await expect.poll(() => framerLog.join("\n"), { timeout: 10_000 }).toContain("frame-ancestors 'none'");
    expect(await framer.frameLocator("#f").locator("#nodes").count()).toBe(0);

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
