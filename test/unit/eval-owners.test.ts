import { describe, expect, it } from "vitest";
import { isKovaError, ownerScopeOf, ownsInstance } from "../../src/core/index.js";
import {
  defineExperiment,
  experimentActorId,
  experimentOwnerProblem,
  ExperimentsNotForPrincipalsError,
  handleEvalSpecRequest,
  isExperimentId,
  newExperimentId,
  ownedExperimentId,
  ownsExperiment,
  parseRunnerKey,
  runnerActorId,
  type EvalStore,
} from "../../src/eval/index.js";
import { SenderIdentity } from "../../src/bus/index.js";
import { headers } from "@nats-io/transport-node";

// Who owns an experiment (docs/security.md, "Experiments"): its id carries the owner's scope.
describe("eval: experiments' owners", () => {
  const key = "key:0123456789abcdef0123";
  const scope = ownerScopeOf(key);

  it("eval owners - an experiment started for a principal carries its scope, and so do its actor, its runners and its cells' runs", () => {
    const id = newExperimentId("ab", key);
    expect(id).toMatch(new RegExp(`^${scope}ab-[0-9a-f]{8}$`));
    expect(isExperimentId(id)).toBe(true);
    expect(ownsExperiment(id, scope)).toBe(true);
    expect(ownsExperiment(id, ownerScopeOf("key:other"))).toBe(false);
    const runner = runnerActorId({ experimentId: id, role: "s", index: 1, slot: 3 });
    expect(parseRunnerKey(runner.slice("eval-subject--".length))).toEqual({ experimentId: id, role: "s", index: 1, slot: 3 });
    // Reserved: even its owner's scope does not make them addressable by the owner.
    expect(ownsInstance(experimentActorId(id), scope)).toBe(false);
    expect(ownsInstance(runner, scope)).toBe(false);
    expect(newExperimentId("ab")).toMatch(/^ab-[0-9a-f]{8}$/);
  });

  it("eval owners - a given id is put in the owner's scope; another principal's scope, or a scope without an owner, is refused", () => {
    expect(ownedExperimentId("run-0123abcd", key)).toBe(`${scope}run-0123abcd`);
    expect(ownedExperimentId(`${scope}run-0123abcd`, key)).toBe(`${scope}run-0123abcd`);
    expect(ownedExperimentId("run-0123abcd")).toBe("run-0123abcd");
    expect(() => ownedExperimentId(`${ownerScopeOf("key:other")}run-0123abcd`, key)).toThrow(/not key:0123456789abcdef0123's/);
    expect(() => ownedExperimentId(`${scope}run-0123abcd`)).toThrow(/--owner/);
    expect(experimentOwnerProblem(`${scope}run-0123abcd`, key)).toBeUndefined();
    expect(experimentOwnerProblem("run-0123abcd", undefined)).toBeUndefined();
    expect(experimentOwnerProblem("run-0123abcd", key)).toMatch(/not in the scope of its owner/);
    expect(experimentOwnerProblem(`${scope}run-0123abcd`, undefined)).toMatch(/in an owner's scope/);
    expect(experimentOwnerProblem(`${scope}run-0123abcd`, "key:other")).toMatch(/not in the scope/);
  });

  it("eval owners - a spec name that reads as an owner scope is refused naming the field", () => {
    expect(() =>
      defineExperiment({
        experiment: { name: `${scope}x` },
        subjects: [{ id: "s", agent: "helper" }],
        tasks: [{ id: "t", input: "?", expected: "x" }],
        verifiers: [{ type: "exact" }],
      }),
    ).toThrow(/experiment\.name.*owner scope/);
  });

  it("eval owners - the nodes' spec endpoint refuses a bus principal before it touches the bucket", async () => {
    const h = headers();
    h.set("Nats-Request-Info", JSON.stringify({ acc: "CLIENT", user: "client-a" }));
    const sender = new SenderIdentity({ trustedAccounts: ["OPERATOR"] }).of(h)!;
    const untouchable = new Proxy({} as EvalStore, {
      get: () => {
        throw new Error("the store was used");
      },
    });
    const err = await handleEvalSpecRequest(untouchable, { op: "spec", experimentId: "x-0123abcd", head: {} }, sender).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ExperimentsNotForPrincipalsError);
    expect(isKovaError(err, "PERMISSION_DENIED")).toBe(true);
    expect(String((err as Error).message)).toContain("nats:CLIENT:client-a may not start experiments");
  });
});
