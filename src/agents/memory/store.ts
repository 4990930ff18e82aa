import { KvStore, type KvConnection } from "../../bus/index.js";
import { recordFormat } from "../../core/index.js";
import type { ChatMessage } from "../model/types.js";
import { toUnits } from "./units.js";

/** Format version of a stored conversation; old versions keep loading. */
export const MEMORY_VERSION = 1;

/** Where a session's conversation lives between runs. */
export interface MemoryStore {
  load(agentId: string, sessionId: string): Promise<ChatMessage[]>;
  save(agentId: string, sessionId: string, messages: readonly ChatMessage[]): Promise<void>;
}

/** A conversation as stored (JSON). */
export interface StoredMemory {
  v: number;
  messages: ChatMessage[];
  ts: number;
}

/** A conversation under its key `<agentId>.<sessionId>` (an agent id has no dot). */
const MEMORY_FORMAT = recordFormat<StoredMemory>({
  describe: (key) => `memory of ${key.slice(0, key.indexOf("."))} session ${key.slice(key.indexOf(".") + 1)}`,
  version: MEMORY_VERSION,
  readable: [1],
});

/**
 * A stored conversation as this build reads it: its messages.
 * @throws UnsupportedFormatError for a conversation a newer Kova stored
 */
export function readStoredMemory(agentId: string, sessionId: string, value: unknown): ChatMessage[] {
  return MEMORY_FORMAT.decode(`${agentId}.${sessionId}`, value).messages;
}

/**
 * Conversations in NATS KV `kova_<cluster>_agent_memory`, key `<agentId>.<sessionId>`,
 * JSON (`nats kv get` shows them), replicated like Kova's other buckets. They are kept
 * outside the actor checkpoint, so a long conversation never makes checkpoints large; the
 * stored form is what the memory policy kept, so its size is bounded by the policy's
 * `max_tokens` (about 4 bytes a token), and a value that would still exceed the server's
 * `max_payload` loses its oldest units first.
 */
export class NatsMemoryStore implements MemoryStore {
  private constructor(
    readonly store: KvStore<StoredMemory>,
    private readonly maxBytes: number,
  ) {}

  /**
   * Opens the bucket, creating it if needed.
   * @param maxBytes the server's max_payload (values are kept below it)
   * @throws JetStream errors when JetStream is unavailable
   */
  static async open(opts: { js: KvConnection; cluster: string; replicas?: number; maxBytes?: number }): Promise<NatsMemoryStore> {
    const store = await KvStore.open(opts.js, opts.cluster, "agentMemory", MEMORY_FORMAT, { replicas: opts.replicas });
    return new NatsMemoryStore(store, (opts.maxBytes ?? 1024 * 1024) - 4096);
  }

  /** @throws UnsupportedFormatError for a conversation stored by a newer format */
  async load(agentId: string, sessionId: string): Promise<ChatMessage[]> {
    return (await this.store.get(`${agentId}.${sessionId}`))?.value.messages ?? [];
  }

  async save(agentId: string, sessionId: string, messages: readonly ChatMessage[]): Promise<void> {
    let units = toUnits(messages);
    const stored = () => ({ v: MEMORY_VERSION, messages: units.flat(), ts: Date.now() });
    while (this.store.encode(stored()).length > this.maxBytes && units.length > 1) units = units.slice(Math.max(1, Math.floor(units.length / 8)));
    await this.store.put(`${agentId}.${sessionId}`, stored());
  }
}
