import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { openOrCreateBucket } from "../../bus/kv-buckets.js";
import { checkFormatVersion } from "../../core/format-version.js";
import type { ChatMessage } from "../model/types.js";
import { toUnits } from "./units.js";

/** Format version of a stored conversation; old versions keep loading. */
export const MEMORY_VERSION = 1;
const READABLE: readonly number[] = [1];

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

/**
 * A stored conversation as this build reads it: its messages.
 * @throws UnsupportedFormatError for a conversation a newer Kova stored
 */
export function readStoredMemory(agentId: string, sessionId: string, value: unknown): ChatMessage[] {
  const stored = value as StoredMemory;
  checkFormatVersion(`memory of ${agentId} session ${sessionId}`, stored?.v, READABLE);
  return stored.messages;
}

const enc = new TextEncoder();

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
    readonly kv: KV,
    private readonly maxBytes: number,
  ) {}

  static bucketName(cluster: string): string {
    return `kova_${cluster}_agent_memory`;
  }

  /**
   * Opens the bucket, creating it if needed.
   * @param maxBytes the server's max_payload (values are kept below it)
   * @throws JetStream errors when JetStream is unavailable
   */
  static async open(opts: { js: JetStreamClient; cluster: string; replicas?: number; maxBytes?: number }): Promise<NatsMemoryStore> {
    const kv = await openOrCreateBucket(opts.js, NatsMemoryStore.bucketName(opts.cluster), { history: 1, replicas: opts.replicas ?? 1 });
    return new NatsMemoryStore(kv, (opts.maxBytes ?? 1024 * 1024) - 4096);
  }

  /** @throws UnsupportedFormatError for a conversation stored by a newer format */
  async load(agentId: string, sessionId: string): Promise<ChatMessage[]> {
    const entry = await this.kv.get(`${agentId}.${sessionId}`);
    if (entry === null || entry.operation !== "PUT") return [];
    return readStoredMemory(agentId, sessionId, entry.json<unknown>());
  }

  async save(agentId: string, sessionId: string, messages: readonly ChatMessage[]): Promise<void> {
    let units = toUnits(messages);
    let data = encode(units.flat());
    while (data.length > this.maxBytes && units.length > 1) {
      units = units.slice(Math.max(1, Math.floor(units.length / 8)));
      data = encode(units.flat());
    }
    await this.kv.put(`${agentId}.${sessionId}`, data);
  }
}

function encode(messages: ChatMessage[]): Uint8Array {
  return enc.encode(JSON.stringify({ v: MEMORY_VERSION, messages, ts: Date.now() } satisfies StoredMemory));
}
