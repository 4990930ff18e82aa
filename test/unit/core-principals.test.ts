import { describe, expect, it } from "vitest";
import { isValidId } from "../../src/core/ids.js";
import { isScoped, ownedAgentId, ownedId, ownerScopeOf, ownsInstance, reserveTemplates } from "../../src/core/principals.js";

describe("principals: ownership carried in ids", () => {
  const a = ownerScopeOf("key:aaaa");
  const b = ownerScopeOf("nats:CLIENT:bob");

  it("principals - a scope is o + 12 hex + _, stable per principal id and distinct between ids; never holds an instance's --", () => {
    expect(a).toMatch(/^o[0-9a-f]{12}_$/);
    expect(ownerScopeOf("key:aaaa")).toBe(a);
    expect(b).not.toBe(a);
    expect(isScoped(`${a}x`)).toBe(true);
    expect(isScoped("user-42")).toBe(false);
  });

  it("principals - a name becomes the caller's own id; its own ids stay as they are; another principal's is refused (undefined); a long name is digested, still a valid id", () => {
    expect(ownedId("conv-1", a)).toBe(`${a}conv-1`);
    expect(ownedId(`${a}conv-1`, a)).toBe(`${a}conv-1`);
    expect(ownedId(`${b}conv-1`, a)).toBeUndefined();
    const long = ownedId("x".repeat(128), a)!;
    expect(isValidId(long) && long.startsWith(a)).toBe(true);
    expect(ownedId("x".repeat(128), a)).toBe(long);
  });

  it("principals - an instance id becomes the caller's instance; a plain agent id is untouched; another's instance is refused; ownership is a prefix test of the key", () => {
    expect(ownedAgentId("support--user-42", a)).toBe(`support--${a}user-42`);
    expect(ownedAgentId(`support--${a}user-42`, a)).toBe(`support--${a}user-42`);
    expect(ownedAgentId(`support--${b}user-42`, a)).toBeUndefined();
    expect(ownedAgentId("helper", a)).toBe("helper");
    const long = ownedAgentId(`support--${"k".repeat(110)}`, a)!;
    expect(isValidId(long) && ownsInstance(long, a)).toBe(true);
    expect(ownsInstance(`support--${a}x`, a)).toBe(true);
    expect(ownsInstance(`support--${b}x`, a)).toBe(false);
    expect(ownsInstance("helper", a)).toBe(false);
  });

  it("principals - an instance of a reserved template (an experiment's actors) is nobody's to address, in the caller's scope too", () => {
    reserveTemplates("reserved-test");
    expect(ownedAgentId("reserved-test--x", a)).toBeUndefined();
    expect(ownedAgentId(`reserved-test--${a}x`, a)).toBeUndefined();
    expect(ownsInstance(`reserved-test--${a}x`, a)).toBe(false);
    expect(ownsInstance(`support--${a}x`, a)).toBe(true);
  });
});
