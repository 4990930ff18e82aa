import { describe, expect, it } from "vitest";
import { KovaTimeoutError } from "../../src/core/errors.js";
import { defineTool } from "../../src/tools/define-tool.js";
import { runTool } from "../../src/tools/invoke.js";
import { toolContext } from "../fixtures/tool-call.js";

const echo = defineTool({
  name: "echo",
  description: "Echoes.",
  idempotent: true,
  parameters: { type: "object", properties: { text: { type: "string" } } },
  run: (args: { text?: string }) => ({ text: args.text }),
});

describe("runTool", () => {
  it("runTool - serializes the result and caps it for the model, keeping the value for the journal", async () => {
    const out = await runTool(echo, { text: "é".repeat(1000) }, toolContext(), 256);
    expect(out.status).toBe("ok");
    expect(out.truncated).toBe(true);
    expect(Buffer.byteLength(out.content)).toBeLessThanOrEqual(256);
    expect(out.content).toMatch(/^\{"text":"é+\n\[… truncated by Kova: showing the first \d+ of 2011 bytes\]$/);
    expect(out.value).toEqual({ text: "é".repeat(1000) });
  });

  it("runTool - a thrown error becomes a structured error result; a plain Error is TOOL_FAILED", async () => {
    const boom = defineTool({
      name: "boom",
      description: "Fails.",
      idempotent: false,
      parameters: { type: "object" },
      run: () => {
        throw new TypeError("cannot read x of undefined");
      },
    });
    const out = await runTool(boom, {}, toolContext());
    expect(out.status).toBe("error");
    expect(out.error).toEqual({ code: "TOOL_FAILED", message: 'tool "boom" failed: cannot read x of undefined', retryable: false, data: { tool: "boom" } });
    expect(JSON.parse(out.content)).toEqual({ error: out.error });
  });

  it("runTool - a thrown value that cannot be printed still becomes a TOOL_FAILED result (runTool never throws)", async () => {
    const unprintable = [
      // String() of this throws: no toString, no valueOf, no Symbol.toPrimitive.
      Object.assign(Object.create(null), { toString: undefined }),
      // An Error whose message getter throws.
      Object.defineProperty(new Error("x"), "message", {
        get() {
          throw new Error("no message for you");
        },
      }),
      // A Proxy whose every trap throws, instanceof included.
      new Proxy(
        {},
        {
          get() {
            throw new Error("trap");
          },
          getPrototypeOf() {
            throw new Error("trap");
          },
        },
      ),
    ];
    for (const thrown of unprintable) {
      const tool = defineTool({
        name: "hostile",
        description: "Throws what it likes.",
        idempotent: false,
        parameters: { type: "object" },
        run: async () => {
          throw thrown;
        },
      });
      const out = await runTool(tool, {}, toolContext());
      expect(out.status).toBe("error");
      expect(out.error).toMatchObject({ code: "TOOL_FAILED", data: { tool: "hostile" } });
      expect(out.error?.message).toMatch(/^tool "hostile" failed: /);
      expect(JSON.parse(out.content)).toEqual({ error: out.error });
    }
  });

  it("runTool - stops waiting when the call's signal aborts, even if the tool ignores it", async () => {
    let entered!: () => void;
    const started = new Promise<void>((r) => (entered = r));
    const stuck = defineTool({
      name: "stuck",
      description: "Never returns.",
      idempotent: true,
      parameters: { type: "object" },
      run: () => {
        entered();
        return new Promise(() => {});
      },
    });
    const controller = new AbortController();
    const pending = runTool(stuck, {}, toolContext({ signal: controller.signal }));
    await started;
    controller.abort(new KovaTimeoutError("tool stuck", 50));
    const out = await pending;
    expect(out.error).toMatchObject({ code: "TIMEOUT", message: "tool stuck timed out after 50 ms", retryable: true });
  });
});
