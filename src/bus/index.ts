/**
 * Kova's A2A bus: NATS connection, envelope + codec, subjects, durable mailboxes,
 * the fast request path, events and the DLQ. The wire contract is docs/protocol.md.
 */
export { Bus, type BusConnectOptions } from "./bus.js";
export { KovaClient, type KovaClientOptions, type MessageOptions } from "./client.js";
export { createEnvelope, validateEnvelope, type A2AEnvelope, type EnvelopeFields, type MessageType } from "./envelope.js";
export {
  CORE_MESSAGE_TYPES,
  isMessageType,
  isWellFormedType,
  knownMessageTypes,
  registerMessageTypes,
  type CoreMessageType,
} from "./message-types.js";
export {
  DEFAULT_CODEC_LIMITS,
  decodeEnvelope,
  decodeValue,
  encodeEnvelope,
  encodeValue,
  encodingOf,
  type CodecLimits,
  type Encoding,
} from "./codec.js";
export { KV_BUCKETS, bucketName, subjectsFor, type KvBucket, type Subjects } from "./subjects.js";
export { AGENT_RECORD_FORMAT, AGENT_RECORD_VERSION, type AgentRecord } from "./registry-record.js";
export { KvStore, openOrCreateBucket, type KvConnection, type KvStoreOptions, type StoredRecord } from "./kv/store.js";
export { SubjectCapture, type JetStreamAccess } from "./subject-capture.js";
export { redactUrl, redactUrls, securityOptions, type NatsSecurity } from "./nats-security.js";
export { connectNats, probeNats } from "./connection.js";
/** The NATS connection as other layers hold it (they import no NATS package themselves). */
export type { NatsConnection } from "@nats-io/transport-node";
export { DEFAULT_INBOX_PREFIX, replyToProblem } from "./reply-subject.js";
export { kovaStreamConfigs, type StreamOptions } from "./streams.js";
export type { SendOptions } from "./send.js";
export type { Mailbox, MailboxContext, MailboxHandler, MailboxOptions } from "./mailbox.js";
export { DEFAULT_RPC_TIMEOUT_MS, RpcDeclined, type RequestOptions, type RpcHandler, type RpcReply, type RpcService, type ServeRpcOptions } from "./rpc.js";
export { DEFAULT_ASK_TIMEOUT_MS, type AskOptions, type RespondOptions } from "./ask.js";
export type { EventStream, KovaEvent, PublishEventOptions } from "./events.js";
export { firstDelivery } from "./events.js";
export type { StoredEventsFrom, StoredEventsReader } from "./stored-events.js";
export { newInbox } from "./inbox.js";
export type { DeadLetterOptions, DlqEntry, DlqMover } from "./dlq.js";
export type { ActivationReply } from "./activation.js";
export type { UnknownAgentSweep } from "./unknown-agents.js";
export { ContentType, DlqReason, Header, defineDlqReasons, knownDlqReasons } from "./wire.js";
export {
  UnknownAgentError,
  BusErrorCode,
  BucketNotFoundError,
  isNoResponders,
  isInfrastructureFailure,
  BusClosedError,
  DecodeError,
  InvalidEnvelopeError,
  NatsUnreachableError,
  KovaNoRespondersError,
  PermissionDeniedError,
  typedNatsError,
  PayloadTooLargeError,
  StreamConflictError,
  UnknownMessageTypeError,
} from "./errors.js";
export { controlRequest } from "./control-request.js";
export { DEFAULT_KV_LIST_TIMEOUT_MS, listKvKeys, readKvEntries, type KvListOptions } from "./kv/keys.js";
export {
  JsApiCode,
  isConsumerNotFound,
  isJetStreamNotEnabled,
  isJetStreamNotReady,
  isMessageGone,
  isNatsNoResponders,
  isNatsTimeout,
  isPermissionDenied,
  isStreamNotFound,
  isSubjectOverlap,
  isTransientNatsError,
  isWrongLastSequence,
  jsApiCode,
} from "./nats-errors.js";
export {
  SenderIdentity,
  admitFromTenant,
  requireOwnInstance,
  tenantAgentId,
  NotOwnedError,
  UnnamedSenderError,
  DEFAULT_CLIENT_INBOX_PREFIX,
  REQUEST_INFO_HEADER,
  type BusPrincipal,
  type SenderTrust,
} from "./principals.js";
// For the layers above (every import from another layer comes through this file).
export { urlHasCredentials } from "./nats-security.js";
