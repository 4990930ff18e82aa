/**
 * Header names, content types and DLQ reasons: the byte-level part of the public
 * contract (docs/protocol.md). Other languages match these strings exactly.
 */
export const Header = {
  /** `application/json` selects JSON; absent or `application/msgpack` means msgpack. */
  ContentType: "Content-Type",
  /** JetStream de-duplication key; Kova sets it to the envelope id. */
  MsgId: "Nats-Msg-Id",
  DlqReason: "Kova-Dlq-Reason",
  DlqError: "Kova-Dlq-Error",
  DlqErrorCode: "Kova-Dlq-Error-Code",
  DlqSubject: "Kova-Dlq-Subject",
  DlqStream: "Kova-Dlq-Stream",
  DlqStreamSeq: "Kova-Dlq-Stream-Seq",
  DlqDeliveries: "Kova-Dlq-Deliveries",
  DlqAgent: "Kova-Dlq-Agent",
  DlqMsgId: "Kova-Dlq-Msg-Id",
  DlqTime: "Kova-Dlq-Time",
  DlqOriginalSize: "Kova-Dlq-Original-Size",
  DlqTruncated: "Kova-Dlq-Truncated",
} as const;

export const ContentType = {
  json: "application/json",
  msgpack: "application/msgpack",
} as const;

/** Why a message went to the DLQ; also the last token of its DLQ subject. */
export const DlqReason = {
  malformedMsgpack: "malformed_msgpack",
  invalidJson: "invalid_json",
  invalidEnvelope: "invalid_envelope",
  unknownType: "unknown_type",
  payloadTooLarge: "payload_too_large",
  expired: "expired",
  maxDeliver: "max_deliver",
  /** Actor runtime: the actor has no handler for the message's type. */
  unhandled: "unhandled",
  /** Actor runtime: the handler failed on every supervised attempt. */
  handlerFailed: "handler_failed",
  /** Actor runtime: the actor was killed while handling the message. */
  killed: "killed",
} as const;

export type DlqReason = (typeof DlqReason)[keyof typeof DlqReason];
