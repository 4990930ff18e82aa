import { createHash } from "node:crypto";
import type { JsonSchema, Tool } from "./types.js";

/** A tool as an OpenAI-compatible chat-completions request lists it. */
export interface ModelToolSpec {
  type: "function";
  function: { name: string; description: string; parameters: JsonSchema };
}

const MODEL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The tools one agent may call, as `ToolRegistry.resolve` found them, in the order its
 * `tools` list names them. OpenAI-compatible APIs accept only `[A-Za-z0-9_-]{1,64}` as a
 * function name, so `everything/echo` is offered to the model as `everything__echo` and
 * `agent:researcher` as `agent_researcher`; `byModelName` maps the model's call back. The
 * mapping depends only on the names and their order, so it is the same after a restart.
 */
export class ToolSet {
  readonly tools: readonly Tool[];
  readonly #byName = new Map<string, Tool>();
  readonly #byModelName = new Map<string, Tool>();
  readonly #modelName = new Map<string, string>();

  constructor(tools: readonly Tool[]) {
    this.tools = Object.freeze([...tools]);
    for (const t of this.tools) {
      this.#byName.set(t.name, t);
      let candidate = modelNameOf(t.name);
      for (let n = 2; this.#byModelName.has(candidate); n++) candidate = withSuffix(modelNameOf(t.name), `_${n}`);
      this.#byModelName.set(candidate, t);
      this.#modelName.set(t.name, candidate);
    }
  }

  get size(): number {
    return this.tools.length;
  }

  /** The tool with this Kova name (`everything/echo`). */
  get(name: string): Tool | undefined {
    return this.#byName.get(name);
  }

  /** The tool the model called by this function name (`everything__echo`), or by its Kova name. */
  byModelName(name: string): Tool | undefined {
    return this.#byModelName.get(name) ?? this.#byName.get(name);
  }

  /** The function name the model sees for a tool of this set. */
  modelName(name: string): string | undefined {
    return this.#modelName.get(name);
  }

  /** The `tools` array of a chat-completions request. */
  modelTools(): ModelToolSpec[] {
    return this.tools.map((t) => ({
      type: "function",
      function: { name: this.#modelName.get(t.name)!, description: t.description, parameters: t.parameters },
    }));
  }
}

function modelNameOf(name: string): string {
  if (MODEL_NAME.test(name)) return name;
  const cleaned = name.replace(/\//g, "__").replace(/[^A-Za-z0-9_-]/g, "_");
  if (cleaned.length <= 64) return cleaned;
  // Long MCP names: keep a readable head and a hash of the whole, so two long names that
  // share a head stay apart.
  const hash = createHash("sha256").update(name).digest("hex").slice(0, 8);
  return `${cleaned.slice(0, 55)}_${hash}`;
}

function withSuffix(base: string, suffix: string): string {
  return base.length + suffix.length <= 64 ? base + suffix : base.slice(0, 64 - suffix.length) + suffix;
}
