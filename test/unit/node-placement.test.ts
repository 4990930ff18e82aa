import { describe, expect, it } from "vitest";
import { assign, ownerOf } from "../../src/node/placement/rendezvous.js";

const actors = Array.from({ length: 3000 }, (_, i) => `actor-${i}`);

describe("rendezvous placement", () => {
  it("placement - every node computes the same owner whatever the order of the node list", () => {
    for (const a of actors.slice(0, 200)) {
      expect(ownerOf(a, ["n1", "n2", "n3"])).toBe(ownerOf(a, ["n3", "n1", "n2"]));
    }
    expect(ownerOf("x", [])).toBeUndefined();
  });

  it("placement - spreads actors evenly over nodes", () => {
    const byNode = assign(actors, ["n1", "n2", "n3"]);
    for (const list of byNode.values()) {
      expect(list.length).toBeGreaterThan(actors.length / 3 - 150);
      expect(list.length).toBeLessThan(actors.length / 3 + 150);
    }
  });

  it("placement - a node leaving moves only its own actors", () => {
    const before = new Map(actors.map((a) => [a, ownerOf(a, ["n1", "n2", "n3"])]));
    for (const a of actors) {
      const after = ownerOf(a, ["n1", "n3"]);
      if (before.get(a) !== "n2") expect(after).toBe(before.get(a));
      else expect(after).not.toBe("n2");
    }
  });

  it("placement - a node joining takes about 1/N of the actors and moves nothing else", () => {
    let moved = 0;
    for (const a of actors) {
      const was = ownerOf(a, ["n1", "n2", "n3"]);
      const now = ownerOf(a, ["n1", "n2", "n3", "n4"]);
      if (was !== now) {
        expect(now).toBe("n4");
        moved++;
      }
    }
    expect(moved).toBeGreaterThan(actors.length / 4 - 150);
    expect(moved).toBeLessThan(actors.length / 4 + 150);
  });
});
