import { describe, expect, it } from "vitest";
import { ActorTemplateRegistry } from "../../src/actors/index.js";
import { isKovaError } from "../../src/core/errors.js";
import { instanceId, parseInstanceId } from "../../src/core/ids.js";
import { parseConfig } from "../../src/node/config.js";
import { configError } from "../fixtures/config-error.js";

describe("templates and instance ids", () => {
  it("instance ids - <template>--<key> is one subject token; the first -- splits it; keys may hold --", () => {
    expect(instanceId("support", "user-42")).toBe("support--user-42");
    expect(parseInstanceId("support--user-42")).toEqual({ template: "support", key: "user-42" });
    expect(parseInstanceId("support--a--b")).toEqual({ template: "support", key: "a--b" });
    expect(parseInstanceId("support---x")).toEqual({ template: "support", key: "-x" });
    for (const id of ["support", "--x", "support--", "support--a.b", "a-b"]) expect(parseInstanceId(id)).toBeUndefined();
    // The id stays within 128 characters: the key's limit depends on the template's length.
    expect(instanceId("t", "k".repeat(125))).toHaveLength(128);
    const long = (() => {
      try {
        return instanceId("t", "k".repeat(126));
      } catch (err) {
        return err;
      }
    })();
    expect(isKovaError(long, "INVALID_ID")).toBe(true);
    expect((long as Error).message).toContain("1-125 characters");
    for (const [t, k] of [
      ["sup--port", "k"],
      ["support-", "k"],
      ["sup.port", "k"],
      ["support", "a b"],
      ["support", ""],
    ]) {
      expect(() => instanceId(t!, k!)).toThrow(/invalid (template name|key of template)/);
    }
  });

  it("template registry - validates, freezes the shared config, resolves ids to a binding, refuses a different template under a taken name", () => {
    const reg = new ActorTemplateRegistry([{ name: "support", type: "counter", config: { tone: { warm: true } } }]);
    const r = reg.resolve("support--u1");
    expect(r?.binding).toEqual({ name: "support", key: "u1", config: { tone: { warm: true } } });
    expect(r?.template.idleAfterMs).toBe(600_000);
    expect(Object.isFrozen(r?.binding.config.tone)).toBe(true);
    expect(reg.resolve("other--u1")).toBeUndefined();
    expect(reg.resolve("support")).toBeUndefined();
    // Same again: a no-op; different settings: refused.
    reg.register({ name: "support", type: "counter", config: { tone: { warm: true } } });
    expect(configError(() => reg.register({ name: "support", type: "counter", idleAfterMs: 5 })).message).toContain("registered twice");
    expect(configError(() => reg.register({ name: "bad--name", type: "counter" })).message).toContain('without "--"');
    expect(configError(() => reg.register({ name: "ok", type: "counter", idleAfterMs: -1 })).message).toContain("idle_after_ms");
  });

  it("config - [[actor_templates]] parse with durations, config tables and modules; bad entries name the key", () => {
    const cfg = parseConfig(
      [
        "[cluster]",
        "activation_sweep_ms = 500",
        "[[actor_templates]]",
        'name = "support"',
        'type = "counter"',
        'idle_after = "15m"',
        'config = { greeting = "hi", limits = { turns = 3 } }',
        'capabilities = ["support"]',
        'module = "./support.js"',
        "[[actor_templates]]",
        'name = "never"',
        'type = "counter"',
        "idle_timeout = 0",
      ].join("\n"),
      { path: "/etc/kova/kova.toml", env: {} },
    );
    expect(cfg.templates).toEqual([
      { name: "support", type: "counter", idleAfterMs: 900_000, config: { greeting: "hi", limits: { turns: 3 } }, capabilities: ["support"] },
      { name: "never", type: "counter", idleAfterMs: 0 },
    ]);
    expect(cfg.modules).toContain("/etc/kova/support.js");
    expect(cfg.activationSweepMs).toBe(500);
    expect(cfg.activationListener).toBe(true);

    const t = (body: string) => configError(() => parseConfig(`[[actor_templates]]\n${body}`, { env: {} }));
    expect(t('name = "a--b"\ntype = "counter"').key).toBe("actor_templates[0].name");
    expect(t('name = "s"\ntype = "counter"\nidle_after = "soon"').key).toBe("actor_templates[0].idle_after");
    expect(t('name = "s"\ntype = "counter"\nidle_after = "1m"\nidle_timeout = "2m"').key).toBe("actor_templates[0].idle_timeout");
    expect(t('name = "s"\ntype = "counter"\nprompt = "x"').message).toContain("prompt");
    const dup = configError(() =>
      parseConfig('[[actor_templates]]\nname = "s"\ntype = "counter"\n[[actor_templates]]\nname = "s"\ntype = "counter"', { env: {} }),
    );
    expect(dup.key).toBe("actor_templates[1].name");
    // A declared actor may not take an id that belongs to a template's instances.
    const clash = configError(() => parseConfig('[[actors]]\nid = "s--1"\ntype = "counter"\n[[actor_templates]]\nname = "s"\ntype = "counter"', { env: {} }));
    expect(clash.key).toBe("actors[0].id");
  });
});
