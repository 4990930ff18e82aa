import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { checkInput, defineWorkflow, loadWorkflowFile, parseWorkflowText } from "../../src/workflow/index.js";
import { WorkflowErrorCode } from "../../src/workflow/errors.js";
import { evaluateCondition, parseCondition, truthy } from "../../src/workflow/condition.js";
import { renderTemplate, templateValue, walk, type PathResolver } from "../../src/workflow/template.js";

const FIXTURE = join(import.meta.dirname, "../fixtures/workflow/report.toml");

function expectInvalid(fn: () => unknown, ...parts: string[]): void {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err, "expected a WorkflowDefinitionError").toBeDefined();
  expect((err as { code: string }).code).toBe(WorkflowErrorCode.WORKFLOW_INVALID);
  for (const p of parts) expect((err as Error).message).toContain(p);
}

const wf = (steps: unknown[], head: Record<string, unknown> = { id: "w" }) => ({ workflow: head, steps }) as never;

describe("workflow definitions", () => {
  it("definition - the example file of docs/workflows.md loads as written", async () => {
    const { definition } = await loadWorkflowFile(FIXTURE);
    expect(definition.id).toBe("report");
    expect(definition.input).toEqual({ topic: { type: "string", required: true } });
    expect(definition.steps.map((s) => `${s.id}:${s.type}`)).toEqual(["research:agent", "review:parallel", "approve:wait", "publish:branch"]);
    const [research, review, approve, publish] = definition.steps;
    expect(research!.onError).toEqual({ strategy: "retry", attempts: 3, backoffMs: 1000, maxBackoffMs: 60_000 });
    expect(review!.type === "parallel" && review!.branches.map((b) => `${b.id}:${b.type === "agent" ? b.agent : ""}`)).toEqual([
      "review.0:critic",
      "review.1:fact_checker",
    ]);
    expect(review!.onError).toEqual({ strategy: "skip" });
    expect(approve).toMatchObject({ type: "wait", for: "approval", timeoutMs: 86_400_000 });
    expect(publish).toMatchObject({ type: "branch", if: "{{steps.approve.output.approved}}" });
    expect(publish!.type === "branch" && publish!.whenFalse).toEqual([{ id: "publish.else", type: "fail", message: "not approved" }]);
  });

  it("definition - JSON files and defineWorkflow take the same shape", () => {
    const json = JSON.stringify({ workflow: { id: "j" }, steps: [{ id: "a", agent: "x", task: "t" }] });
    expect(parseWorkflowText(json, "flow.json").definition.steps[0]).toMatchObject({ id: "a", type: "agent", agent: "x", task: "t" });
    const d = defineWorkflow({
      workflow: { id: "code" },
      steps: [{ id: "l", type: "loop", max_iterations: 3, until: "steps.s.output == 'done'", steps: [{ id: "s", agent: "x", task: "go {{loop.iteration}}" }] }],
    });
    expect(d.steps[0]).toMatchObject({ type: "loop", maxIterations: 3, until: "steps.s.output == 'done'" });
  });

  it("definition - errors name the workflow, the step and the field", () => {
    expectInvalid(() => defineWorkflow(wf([{ id: "a", agent: "x" }])), "workflow w", "step a", "task");
    expectInvalid(
      () => defineWorkflow(wf([{ id: "a", agent: "x", task: "t", on_error: { strategy: "retyr" } }])),
      "step a",
      "on_error.strategy",
      "retry, skip, abort or fallback",
    );
    expectInvalid(() => defineWorkflow(wf([{ id: "a", agent: "x", task: "t", timout: "1s" }])), "step a", "timout", "did you mean timeout");
    expectInvalid(
      () =>
        defineWorkflow(
          wf([
            { id: "a", agent: "x", task: "t" },
            { id: "a", agent: "y", task: "t" },
          ]),
        ),
      "step a",
      "duplicate step id",
    );
    expectInvalid(
      () =>
        defineWorkflow(
          wf([
            { id: "a", agent: "x", task: "{{steps.reserch.output}}" },
            { id: "research", agent: "x", task: "t" },
          ]),
        ),
      "step a",
      "task",
      "no step reserch",
      "did you mean research",
    );
    expectInvalid(
      () => defineWorkflow(wf([{ id: "a", agent: "x", task: "{{input.topc}}" }], { id: "w", input: { topic: "string" } })),
      "input.topc",
      "declares only topic",
    );
    expectInvalid(() => defineWorkflow(wf([{ id: "a", agent: "x", task: "{{steps.a}}" }])), "step a", "task", "steps.<id>.output");
    expectInvalid(
      () => defineWorkflow(wf([{ id: "w1", type: "wait", for: "approval", on_error: { strategy: "retry" } }])),
      "step w1",
      "retry applies to agent steps",
    );
    expectInvalid(() => defineWorkflow(wf([{ id: "w1", type: "wait", for: "timer" }])), "step w1", "duration", "required");
    expectInvalid(
      () =>
        defineWorkflow(
          wf([
            // biome-ignore lint/suspicious/noThenProperty: `then` is the workflow format's key (files and defineWorkflow)
            { id: "b", if: "steps.x.output ==", then: { fail: "x" } },
            { id: "x", agent: "a", task: "t" },
          ]),
        ),
      "step b",
      "if",
      "ends too early",
    );
    expectInvalid(
      () => defineWorkflow(wf([{ id: "l", type: "loop", max_iterations: 0, steps: [{ id: "s", agent: "x", task: "t" }] }])),
      "step l",
      "max_iterations",
    );
    expectInvalid(() => defineWorkflow(wf([{ id: "p", type: "parallel", branches: [{ agent: "x" }] }])), "step p.0", "task");
    expectInvalid(() => defineWorkflow(wf([{ id: "a", agent: "x", task: "t", on_error: { strategy: "fallback" } }])), "step a", "on_error.agent");
    expectInvalid(() => defineWorkflow(wf([])), "steps", "at least one");
    expectInvalid(() => parseWorkflowText("[workflow\nid=1", "bad.toml"), "bad.toml", "cannot parse");
  });

  it("definition - a parallel step's retry goes to its agent branches; a fallback reuses the step's task", () => {
    const d = defineWorkflow(
      wf([
        {
          id: "p",
          type: "parallel",
          on_error: { strategy: "retry", attempts: 2, backoff: "10ms" },
          branches: [
            { agent: "x", task: "t" },
            { type: "wait", for: "timer", duration: "1s" },
            { agent: "y", task: "u", on_error: { strategy: "skip" } },
          ],
        },
        { id: "f", agent: "x", task: "again {{steps.p.output}}", on_error: { strategy: "fallback", agent: "backup" } },
      ]),
    );
    const p = d.steps[0]!;
    expect(p.onError).toBeUndefined();
    expect(p.type === "parallel" && p.branches.map((b) => b.onError?.strategy ?? "none")).toEqual(["retry", "none", "skip"]);
    expect(d.steps[1]!.onError).toEqual({ strategy: "fallback", step: { id: "f.fallback", type: "agent", agent: "backup", task: "again {{steps.p.output}}" } });
  });

  it("definition - a subject wait names one concrete subject that is not a system, inbox or internal Kova subject", () => {
    const ok = defineWorkflow(
      wf([{ id: "paid", type: "wait", for: "event", subject: "orders.{{input.id}}.paid", timeout: "1h" }], { id: "w", input: { id: "string" } }),
    );
    expect(ok.steps[0]).toMatchObject({ type: "wait", for: "event", subject: "orders.{{input.id}}.paid", timeoutMs: 3_600_000 });
    expect(defineWorkflow(wf([{ id: "e", for: "event", subject: "kova.default.events.s1.run-1" }])).steps[0]).toMatchObject({
      subject: "kova.default.events.s1.run-1",
    });
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event" }])), "step e", "event", "or a NATS subject");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event", subject: "orders.*.paid" }])), "step e", "subject", "wildcard");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event", subject: "orders.>" }])), "step e", "subject", "wildcard");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event", subject: "$KV.kova_default_agents.x" }])), "step e", "subject", "system subject");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event", subject: "_INBOX.abc" }])), "step e", "subject", "reply inbox");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event", subject: "kova.default.a2a.researcher" }])), "step e", "subject", "Kova's own subjects");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event", subject: "orders..paid" }])), "step e", "subject", "empty token");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "event", subject: "orders paid" }])), "step e", "subject", "white space");
    expectInvalid(() => defineWorkflow(wf([{ id: "e", for: "approval", subject: "orders.paid" }])), "step e", "subject", 'only a wait for "event"');
  });

  it("input - checked against the declaration, text converted for numbers and booleans, defaults filled", () => {
    const d = defineWorkflow(
      wf([{ id: "a", agent: "x", task: "{{input.topic}} {{input.n}}" }], {
        id: "w",
        input: { topic: "string", n: "integer?", flag: { type: "boolean", default: false } },
      }),
    );
    expect(checkInput(d, { topic: "t", n: "3" })).toEqual({ topic: "t", n: 3, flag: false });
    expect(() => checkInput(d, {})).toThrow(/input.topic: is required/);
    expect(() => checkInput(d, { topic: "t", n: "x" })).toThrow(/input.n: must be an integer/);
    expect(() => checkInput(d, { topic: "t", other: 1 })).toThrow(/input.other: is not declared/);
  });
});

describe("templates and conditions", () => {
  const data = { input: { topic: "nats", n: 7 }, steps: { r: { output: { title: "T", tags: ["a", "b"] } } } };
  const resolver: PathResolver = (segs) => walk(data, segs, "");

  it("template - renders paths, objects as JSON, and names the missing path", () => {
    expect(renderTemplate("About {{input.topic}} ({{ input.n }})", resolver)).toBe("About nats (7)");
    expect(renderTemplate("{{steps.r.output.tags}}", resolver)).toBe('["a","b"]');
    expect(templateValue("{{steps.r.output}}", resolver)).toEqual({ title: "T", tags: ["a", "b"] });
    expect(() => renderTemplate("x {{steps.r.output.summary}}", resolver, "s1")).toThrow(
      /step s1: template "x \{\{steps.r.output.summary\}\}": steps.r.output.summary: .*has no field summary \(fields: title, tags\)/,
    );
    expect(() => renderTemplate("{{steps.r.output.tags.5}}", resolver)).toThrow(/has no element 5/);
    expect(() => renderTemplate("{{nope.x}}", resolver)).toThrow(/unknown root nope/);
    expect(() => renderTemplate("{{input.topic}", resolver)).toThrow(/unbalanced/);
  });

  it("condition - comparisons, logic and text truthiness without eval", () => {
    const ev = (c: string) => evaluateCondition(parseCondition(c), c, resolver);
    expect(ev("{{input.n}} >= 7 && input.topic == 'nats'")).toBe(true);
    expect(ev("input.n > 10 || not (steps.r.output.tags contains 'b')")).toBe(false);
    expect(ev('steps.r.output.title != "T"')).toBe(false);
    expect(ev("input.n == '7'")).toBe(true);
    expect(truthy("false")).toBe(false);
    expect(truthy(" No ")).toBe(false);
    expect(truthy("yes")).toBe(true);
    expect(truthy([])).toBe(false);
    expect(() => ev("input.missing == 1")).toThrow(/input.missing: .*has no field missing/);
    expect(() => parseCondition("input.a ==")).toThrow(/ends too early/);
    expect(() => parseCondition("input.a = 1")).toThrow(/unexpected "="/);
    expect(() => parseCondition("constructor.prototype")).toThrow(/unknown root constructor/);
  });
});
