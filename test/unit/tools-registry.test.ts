import { describe, expect, it } from "vitest";
import { configError } from "../fixtures/config-error.js";
import { defineTool } from "../../src/tools/define-tool.js";
import { ToolNameConflictError } from "../../src/tools/errors.js";
import { isIdempotentCall } from "../../src/tools/idempotency.js";
import { ToolRegistry, type ToolProvider } from "../../src/tools/registry.js";
import type { Tool } from "../../src/tools/types.js";

function tool(name: string, idempotent = true): Tool {
  return defineTool({ name, description: `the ${name} tool`, idempotent, parameters: { type: "object" }, run: () => name });
}

/** A provider whose list the test changes, like an MCP server announcing tools/list_changed. */
class FakeServer implements ToolProvider {
  #tools: Tool[] = [];
  #listeners = new Set<() => void>();
  constructor(readonly namespace: string) {}
  list(): readonly Tool[] {
    return this.#tools;
  }
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
  set(names: string[]): void {
    this.#tools = names.map((n) => tool(`${this.namespace}/${n}`));
    for (const l of this.#listeners) l();
  }
}

describe("tool registry", () => {
  it("registry - resolves exact names, server wildcards and the mcp: prefix in list order, without duplicates", () => {
    const everything = new FakeServer("everything");
    everything.set(["echo", "add", "longRunningOperation"]);
    const fs = new FakeServer("fs");
    fs.set(["read_file"]);
    const reg = new ToolRegistry().register(tool("http_request"), tool("file_read"), tool("calculator"));
    reg.addProvider("mcp:everything", everything);
    reg.addProvider("mcp:fs", fs);

    const set = reg.resolve(["calculator", "mcp:everything/*", "everything/echo", "file_*"]);
    expect(set.tools.map((t) => t.name)).toEqual(["calculator", "everything/echo", "everything/add", "everything/longRunningOperation", "file_read"]);
    expect(reg.resolve(["*"]).tools.map((t) => t.name)).toEqual(["http_request", "file_read", "calculator"]);
    expect(reg.resolve(["*/*"]).size).toBe(4);
  });

  it("registry - an unknown name is a ConfigError naming the entry and listing close matches", () => {
    const reg = new ToolRegistry().register(tool("http_request"), tool("file_read"), tool("file_write"));
    const err = configError(() => reg.resolve(["file_read", "http_requests"], "agents[0].tools"));
    expect(err.key).toBe("agents[0].tools[1]");
    expect(err.code).toBe("INVALID_CONFIG");
    expect(err.message).toContain('unknown tool "http_requests": did you mean "http_request"?');
    const far = configError(() => reg.resolve(["zzzzzzzz"]));
    expect(far.message).toContain("known tools: http_request, file_read, file_write");
    const wild = configError(() => reg.resolve(["mcp:nosuch/*"]));
    expect(wild.message).toContain('"mcp:nosuch/*" matches no tool and no MCP server is named "nosuch"');
    expect(configError(() => reg.resolve(["mcp:http_request"])).message).toContain("is not a tool name or pattern");
    expect(configError(() => reg.resolve(["bad name"])).key).toBe("tools[0]");
  });

  it("registry - a server still starting resolves to nothing without error and shows up after it announces its tools", () => {
    const server = new FakeServer("everything");
    const reg = new ToolRegistry();
    let changes = 0;
    reg.onChange(() => changes++);
    reg.addProvider("mcp:everything", server);
    expect(reg.resolve(["everything/*"]).size).toBe(0);
    server.set(["echo"]);
    expect(changes).toBe(2);
    expect(reg.resolve(["everything/*"]).tools.map((t) => t.name)).toEqual(["everything/echo"]);
    server.set(["echo", "add"]);
    expect(reg.resolve(["mcp:everything/*"]).size).toBe(2);
  });

  it("registry - a duplicate registration is refused; a provider's clashing tool is left out and the registered one kept", () => {
    const reg = new ToolRegistry().register(tool("calculator"));
    expect(() => reg.register(tool("calculator"))).toThrow(ToolNameConflictError);
    const clash: ToolProvider = { list: () => [tool("calculator", false), tool("agent:helper")] };
    const remove = reg.addProvider("agents", clash);
    expect(reg.get("calculator")!.idempotent).toBe(true);
    expect(reg.resolve(["agent:*"]).tools.map((t) => t.name)).toEqual(["agent:helper"]);
    remove();
    expect(reg.get("agent:helper")).toBeUndefined();
  });

  it("registry - describe gives name, description, schema, idempotency class and source", () => {
    const reg = new ToolRegistry().register(
      tool("file_read"),
      tool("file_write", false),
      defineTool({
        name: "http_request",
        description: "HTTP",
        idempotent: false,
        idempotentFor: (a: { method?: string }) => a.method === "GET",
        parameters: { type: "object", properties: { method: { type: "string" } } },
        run: () => null,
      }),
    );
    const server = new FakeServer("everything");
    server.set(["echo"]);
    reg.addProvider("mcp:everything", server);
    expect(reg.describe().map((d) => [d.name, d.idempotency, d.source])).toEqual([
      ["file_read", "idempotent", "code"],
      ["file_write", "not_idempotent", "code"],
      ["http_request", "per_call", "code"],
      ["everything/echo", "idempotent", "mcp:everything"],
    ]);
    const one = reg.describe(["http_request"])[0]!;
    expect(one).toMatchObject({ description: "HTTP", requiresApproval: false, parameters: { type: "object" } });
    const http = reg.get("http_request")!;
    expect(isIdempotentCall(http, { method: "GET" })).toBe(true);
    expect(isIdempotentCall(http, { method: "POST" })).toBe(false);
  });

  it("tool set - offers model-safe function names and maps the model's call back", () => {
    const server = new FakeServer("everything");
    server.set(["echo", "get.resource"]);
    const reg = new ToolRegistry().register(tool("everything__echo"), tool("agent:researcher"));
    reg.addProvider("mcp:everything", server);
    const set = reg.resolve(["everything__echo", "everything/*", "agent:researcher"]);
    const names = set.modelTools().map((t) => t.function.name);
    expect(names).toEqual(["everything__echo", "everything__echo_2", "everything__get_resource", "agent_researcher"]);
    for (const n of names) expect(n).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(set.byModelName("everything__echo_2")!.name).toBe("everything/echo");
    expect(set.byModelName("agent_researcher")!.name).toBe("agent:researcher");
    const long = new FakeServer("s");
    long.set(["x".repeat(100), `${"x".repeat(99)}y`]);
    const reg2 = new ToolRegistry();
    reg2.addProvider("mcp:s", long);
    const longNames = reg2
      .resolve(["s/*"])
      .modelTools()
      .map((t) => t.function.name);
    expect(new Set(longNames).size).toBe(2);
    for (const n of longNames) expect(n.length).toBeLessThanOrEqual(64);
  });
});
