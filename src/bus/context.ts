import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../core/index.js";
import type { CodecLimits } from "./codec.js";
import type { ReplyGuard } from "./reply-guard.js";
import type { RequestMux } from "./request-mux.js";
import type { SenderIdentity } from "./principals.js";
import type { Subjects } from "./subjects.js";

/** What the bus's parts share: one connection and the names derived from the cluster. */
export interface BusContext {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly cluster: string;
  readonly subjects: Subjects;
  /** The server's max_payload: the largest message it accepts, headers included. */
  readonly maxPayload: number;
  readonly limits: CodecLimits;
  readonly log: Logger;
  /** The `from` of messages this process sends when the caller names nobody. */
  readonly clientId: string;
  /** Fast-path request/reply without nats.js's per-request error objects. */
  readonly mux: RequestMux;
  /** Inbox prefixes a message's `replyTo` may use (see reply-subject.ts). */
  readonly inboxPrefixes: readonly string[];
  /** Which core requests' reply subjects this process answers (the rpc fast path, a node's control endpoints). */
  readonly replies: ReplyGuard;
  /** Who sent a message (principals.ts): tenants' messages are held to what they own. */
  readonly senders: SenderIdentity;
}
