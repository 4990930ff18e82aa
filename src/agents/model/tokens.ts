import type { ChatCompletionFunctionDefinition } from "gpt-tokenizer/functionCalling";
import type { ChatMessage, ToolSpec } from "./types.js";

/**
 * Token counts for fitting a conversation into a model's window before each call. They
 * are estimates (the chat format adds tokens the API does not document exactly); the
 * provider's `usage` stays the source of truth for accounting.
 */

export type EncodingName = "o200k_base" | "cl100k_base" | "p50k_base" | "r50k_base";

/** Counts tokens with one encoding. Synchronous and cached per message object. */
export interface TokenCounter {
  readonly encoding: EncodingName;
  /** Tokens of plain text; special-token text such as `<|endoftext|>` counts as ordinary text. */
  countText(text: string): number;
  /**
   * One message with its chat-format overhead. Counts are cached per message object:
   * treat messages as immutable once counted (make a new object to change one).
   */
  countMessage(message: ChatMessage): number;
  /** A whole request: messages, tool definitions and the tokens that prime the reply. */
  countRequest(messages: readonly ChatMessage[], tools?: readonly ToolSpec[]): number;
}

// OpenAI's cookbook ("How to count tokens with tiktoken") for current chat models:
// every message costs 3 tokens of framing plus 1 for a name, and every reply is primed
// with 3 (<|start|>assistant<|message|>). A tool call adds its name, arguments and 3.
const PER_MESSAGE = 3;
const PER_NAME = 1;
const PER_TOOL_CALL = 3;
const REPLY_PRIMING = 3;
// Tool definitions are rendered as a TypeScript namespace in the system prompt; OpenAI
// does not document it, so this follows gpt-tokenizer's measured formula.
const PER_TOOLS_BLOCK = 9;
const TOOLS_WITH_SYSTEM_DISCOUNT = 4;

// gpt-tokenizer's BPE is quadratic in the length of one pre-token, and a run without a
// break (no spaces, or only spaces) is one pre-token: measured here, 10k "B"s took 0.23 s,
// 100k took 11 s and 200k took 54 s of blocked event loop. Any client controls message
// text, so runs longer than this are estimated instead of encoded.
const MAX_EXACT_RUN = 256;
// Beyond this size a text is estimated as a whole: exact counts of megabytes buy nothing
// (the provider's usage is the source of truth) and would still take seconds.
const MAX_EXACT_TEXT = 256 * 1024;
const LONG_RUN = new RegExp(`\\S{${MAX_EXACT_RUN + 1},}|\\s{${MAX_EXACT_RUN + 1},}`, "g");
const NON_ASCII = /[^ -~\s]/; // anything but printable ASCII and whitespace

/**
 * A conservative (over-)estimate for text too costly to encode: BPE merges ASCII into at
 * least 2 characters per token except in rare cases, while CJK and other non-ASCII text can
 * cost a token per UTF-16 unit. Overcounting only makes context fitting trim earlier.
 */
function estimateTokens(text: string): number {
  return NON_ASCII.test(text) ? text.length : Math.ceil(text.length / 2);
}

type Encoder = { countTokens(text: string, options?: { disallowedSpecial?: Set<string> }): number };

// Each encoding's ranks are megabytes of JavaScript (o200k_base: 2.4 MB, about 0.7 s and
// 38 MB of heap to load, measured here), so one is imported only when a model needs it.
const LOADERS: Record<EncodingName, () => Promise<Encoder>> = {
  o200k_base: () => import("gpt-tokenizer/encoding/o200k_base"),
  cl100k_base: () => import("gpt-tokenizer/encoding/cl100k_base"),
  p50k_base: () => import("gpt-tokenizer/encoding/p50k_base"),
  r50k_base: () => import("gpt-tokenizer/encoding/r50k_base"),
};

let modelMap: Promise<Record<string, string>> | undefined;
const counters = new Map<EncodingName, Promise<TokenCounter>>();

/**
 * The encoding of a model id: exact match in gpt-tokenizer's table of older models, else a
 * listed model followed by `-` (`gpt-4-0613-preview` → gpt-4's), else `o200k_base` (every
 * current OpenAI model, and the best guess for others). A provider prefix (`openai/gpt-4o`)
 * is ignored.
 */
export async function encodingForModel(model: string): Promise<EncodingName> {
  modelMap ??= import("gpt-tokenizer/mapping").then((m) => m.modelToEncodingMap as Record<string, string>);
  const map = await modelMap;
  // Azure spells gpt-3.5 without the dot.
  const id = model
    .slice(model.lastIndexOf("/") + 1)
    .toLowerCase()
    .replace(/^gpt-35/, "gpt-3.5");
  let found = map[id];
  if (found === undefined) {
    // Only a dated or suffixed variant of a listed model inherits its encoding ("gpt-4-0613-x"
    // from "gpt-4"); a bare prefix would give gpt-4o and gpt-4.1 the encoding of gpt-4.
    let best = "";
    for (const known of Object.keys(map)) if (known.length > best.length && id.startsWith(`${known}-`)) best = known;
    found = best === "" ? undefined : map[best];
  }
  switch (found) {
    case "cl100k_base":
    case "p50k_base":
    case "r50k_base":
      return found;
    case "p50k_edit":
      return "p50k_base";
    case "gpt2":
      return "r50k_base";
    default:
      return "o200k_base";
  }
}

/** The counter for a model, loading its encoding on first use (shared by every model using it). */
export async function loadTokenCounter(model: string): Promise<TokenCounter> {
  const encoding = await encodingForModel(model);
  let counter = counters.get(encoding);
  if (!counter) {
    counter = Promise.all([LOADERS[encoding](), import("gpt-tokenizer/functionCalling")]).then(
      ([encoder, fc]) => new CachingCounter(encoding, encoder, fc.formatFunctionDefinitions),
    );
    counters.set(encoding, counter);
    counter.catch(() => counters.delete(encoding));
  }
  return counter;
}

class CachingCounter implements TokenCounter {
  // Context fitting recounts the same history before every call: messages are immutable
  // once appended, so each is counted once.
  private readonly messages = new WeakMap<ChatMessage, number>();
  private readonly toolSets = new WeakMap<readonly ToolSpec[], number>();
  private readonly plain = { disallowedSpecial: new Set<string>() };

  constructor(
    readonly encoding: EncodingName,
    private readonly encoder: Encoder,
    /** Renders tool definitions roughly as OpenAI shows them to the model (a TypeScript namespace). */
    private readonly formatTools: (defs: readonly ChatCompletionFunctionDefinition[]) => string,
  ) {}

  countText(text: string): number {
    if (text.length === 0) return 0;
    if (text.length > MAX_EXACT_TEXT) return estimateTokens(text);
    // Ordinary text (no long run) is counted exactly, in one piece.
    let n = 0;
    let from = 0;
    for (const run of text.matchAll(LONG_RUN)) {
      const at = run.index ?? 0;
      if (at > from) n += this.encode(text.slice(from, at));
      n += estimateTokens(run[0]);
      from = at + run[0].length;
    }
    return from === 0 ? this.encode(text) : n + (from < text.length ? this.encode(text.slice(from)) : 0);
  }

  private encode(text: string): number {
    return this.encoder.countTokens(text, this.plain);
  }

  countMessage(message: ChatMessage): number {
    const cached = this.messages.get(message);
    if (cached !== undefined) return cached;
    let n = PER_MESSAGE + this.countText(message.role) + this.countText(message.content ?? "");
    if ((message.role === "system" || message.role === "user") && message.name) n += this.countText(message.name) + PER_NAME;
    if (message.role === "assistant") {
      for (const call of message.toolCalls ?? []) n += this.countText(call.name) + this.countText(call.arguments) + PER_TOOL_CALL;
    }
    this.messages.set(message, n);
    return n;
  }

  countRequest(messages: readonly ChatMessage[], tools: readonly ToolSpec[] = []): number {
    let n = REPLY_PRIMING;
    for (const m of messages) n += this.countMessage(m);
    if (tools.length > 0) {
      n += this.countTools(tools);
      if (messages.some((m) => m.role === "system")) n -= TOOLS_WITH_SYSTEM_DISCOUNT;
    }
    return n;
  }

  private countTools(tools: readonly ToolSpec[]): number {
    const cached = this.toolSets.get(tools);
    if (cached !== undefined) return cached;
    const defs = tools.map((t) => ({
      name: t.name,
      description: t.description,
      parameters: t.parameters as unknown as ChatCompletionFunctionDefinition["parameters"],
    }));
    const n = PER_TOOLS_BLOCK + this.countText(this.formatTools(defs));
    this.toolSets.set(tools, n);
    return n;
  }
}
