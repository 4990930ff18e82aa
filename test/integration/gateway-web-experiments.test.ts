import { describe, expect, it } from "vitest";
import { chromium } from "playwright-core";
import { KovaClient } from "../../src/bus/index.js";
import { defineExperiment, runExperiment } from "../../src/eval/index.js";
import { hashKey } from "../../src/gateway/index.js";
import { keyPrincipal } from "../../src/gateway/keys.js";
import { scriptedReply, type ScriptedHandler } from "../../src/testing/index.js";
import { defer } from "../fixtures/disposable.js";
import { startGatewayRig } from "../fixtures/gateway/rig.js";

// Subject "terse" (its own system prompt) answers task i with 2i + 1 from task 2 on; "base" always with 2i.
const handler: ScriptedHandler = (r) => {
  const i = Number(/^q(\d+)/.exec(String(r.lastMessage?.content))?.[1] ?? 0);
  const terse = r.messages[0]?.content === "Be terse.";
  return scriptedReply.text(String(terse && i >= 2 ? 2 * i + 1 : 2 * i), { usage: { inputTokens: terse ? 10 : 40, outputTokens: 2 } });
};

const spec = (owner: string) =>
  defineExperiment({
    experiment: { name: owner === "admin" ? "page" : "mine", repetitions: 2, concurrency: 4 },
    subjects: [
      { id: "base", agent: "helper" },
      { id: "terse", agent: "helper", system: "Be terse." },
    ],
    tasks: Array.from({ length: 4 }, (_, i) => ({ id: `t${i}`, input: `q${i}: ${i} + ${i}?`, expected: String(2 * i) })),
    verifiers: [{ type: "exact" }],
  });

describe("gateway: the web view's experiments page", () => {
  it("web - the experiments page lists experiments and shows one: the table per subject, score and cost per subject, score per task, with no inline script (real headless chromium); a key sees only its own", async () => {
    await using rig = await startGatewayRig({ handler, agents: [], llmAgents: [{ id: "helper" }], keys: { other: ["helper"] } });
    await using client = await KovaClient.connect({ servers: rig.nats.url, cluster: rig.cluster });
    const adminRun = await runExperiment(client, spec("admin"));
    const otherId = keyPrincipal({ hash: hashKey(rig.keys.other!) });
    const otherRun = await runExperiment(client, spec("other"), { owner: otherId });

    const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
    await using _browser = defer(() => browser.close());
    const context = await browser.newContext({ extraHTTPHeaders: { authorization: `Bearer ${rig.key}` }, viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    const violations: string[] = [];
    page.on("console", (m) => {
      if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
    });
    const res = await page.goto(`${rig.url}/ui/experiments#${adminRun.experimentId}`);
    expect(res?.headers()["content-security-policy"]).toContain("script-src 'self'");
    expect(await page.locator("script:not([src])").count()).toBe(0);

    // the list: both experiments for the admin key
    await page.locator(`#experiments tr[data-experiment="${adminRun.experimentId}"]`).waitFor({ timeout: 20_000 });
    expect(await page.locator(`#experiments tr[data-experiment="${otherRun.experimentId}"] td`).nth(1).textContent()).toBe("completed");

    // the detail: the table per subject
    await page.locator('#subjects tr[data-subject="terse"]').waitFor({ timeout: 20_000 });
    expect(await page.locator("#detail-state").textContent()).toBe("completed");
    const base = await page.locator('#subjects tr[data-subject="base"] td').allTextContents();
    const terse = await page.locator('#subjects tr[data-subject="terse"] td').allTextContents();
    expect(base.slice(0, 5)).toEqual(["base", "1.000 [1.000, 1.000]", "1.000", "@1 1.000  @2 1.000", "8/8"]);
    expect(terse.slice(0, 5)).toEqual(["terse", "0.500 [-0.419, 1.419]", "0.500", "@1 0.500  @2 0.500", "8/8"]);
    expect(base[5]).toBe("320 / 16");
    expect(terse[5]).toBe("80 / 16");

    // score per subject: a bar per subject, as long as its score, with its interval
    const scoreBars = page.locator("#plot-score rect.bar");
    expect(await scoreBars.evaluateAll((els) => els.map((e) => `${e.getAttribute("data-subject")}=${e.getAttribute("data-value")}`))).toEqual([
      "base=1",
      "terse=0.5",
    ]);
    const widths = await scoreBars.evaluateAll((els) => els.map((e) => Number(e.getAttribute("width"))));
    expect(widths[1]).toBeCloseTo(widths[0]! / 2, 5);
    expect(await page.locator("#plot-score line.ci").count()).toBe(2);
    // cost per subject: base used 4× the input tokens at the rig's price, so its bar is the longest
    const costs = await page
      .locator("#plot-cost rect.bar")
      .evaluateAll((els) => els.map((e) => [e.getAttribute("data-subject"), Number(e.getAttribute("data-value")), Number(e.getAttribute("width"))] as const));
    expect(costs.map((c) => c[0])).toEqual(["base", "terse"]);
    expect(costs[0]![1]).toBeGreaterThan(costs[1]![1]);
    expect(costs[0]![2]).toBeGreaterThan(costs[1]![2]);
    // score per task: one cell per task and subject, by score
    const cells = await page
      .locator("#plot-tasks rect.task-cell")
      .evaluateAll((els) => els.map((e) => `${e.getAttribute("data-subject")}/${e.getAttribute("data-task")}=${e.getAttribute("data-score")}`));
    expect(cells.sort()).toEqual(["base/t0=1", "base/t1=1", "base/t2=1", "base/t3=1", "terse/t0=1", "terse/t1=1", "terse/t2=0", "terse/t3=0"]);

    // another experiment by its link
    await page.locator(`#experiments a[href="#${otherRun.experimentId}"]`).click();
    await expect.poll(() => page.locator("#detail-title").textContent(), { timeout: 10_000 }).toBe(otherRun.experimentId);
    expect(violations).toEqual([]);

    // a key that is no admin sees its own experiment only; another's is 404
    const asOther = (path: string) => fetch(`${rig.url}${path}`, { headers: { authorization: `Bearer ${rig.keys.other}` } });
    const listed = (await (await asOther("/ui/api/experiments")).json()) as { experiments: Array<{ experimentId: string }> };
    expect(listed.experiments.map((e) => e.experimentId)).toEqual([otherRun.experimentId]);
    expect((await asOther(`/ui/api/experiments/${adminRun.experimentId}`)).status).toBe(404);
    expect((await asOther(`/ui/api/experiments/${otherRun.experimentId}`)).status).toBe(200);
    expect((await fetch(`${rig.url}/ui/api/experiments`)).status).toBe(401);
  }, 90_000);
});
