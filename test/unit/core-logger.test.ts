import { describe, expect, it } from "vitest";
import { childLogger, componentLogger } from "../../src/core/logger.js";
import { captureLogs, repeatedKeys } from "../fixtures/capture-logs.js";

describe("component loggers", () => {
  it("logger - a part handed a logger that already names a component keeps it and is named in `part`; a key bound to the same value is not bound again", () => {
    const logs = captureLogs();
    const node = componentLogger(logs.logger.child({ nodeId: "n1" }), "node");
    componentLogger(node, "bus", { cluster: "c" }).info("one");
    componentLogger(childLogger(node, { nodeId: "n1" }), "node").info("two");
    componentLogger(componentLogger(node, "bus"), "wal").info("three");
    const lines = logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    for (const l of logs.lines) expect(repeatedKeys(l), l).toEqual([]);
    expect(lines.map(({ msg, component, part, nodeId }) => ({ msg, component, part, nodeId }))).toEqual([
      { msg: "one", component: "node", part: "bus", nodeId: "n1" },
      { msg: "two", component: "node", part: undefined, nodeId: "n1" },
      // A third level has no key left to name it: the line still parses to one value per key.
      { msg: "three", component: "node", part: "bus", nodeId: "n1" },
    ]);
    expect(lines[0]?.cluster).toBe("c");
  });

  it("logger - repeatedKeys reads the line's text: a key written twice at the top level is found, nested and quoted look-alikes are not", () => {
    expect(repeatedKeys('{"a":1,"b":{"a":2},"c":"\\"a\\":3","a":4}')).toEqual(["a"]);
    expect(repeatedKeys('{"a":1,"b":[{"a":2}],"msg":"a:b"}')).toEqual([]);
  });
});
