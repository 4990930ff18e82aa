import { ErrorCode, KovaError } from "../core/index.js";

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
  /** Set when the full header set did not fit max_payload beside the whole body. */
  DlqHeadersTrimmed: "Kova-Dlq-Headers-Trimmed",
} as const;

export const ContentType = {
  json: "application/json",
  msgpack: "application/msgpack",
} as const;

/** Why a message went to the DLQ: a lowercase token, also the last token of its DLQ subject. */
export type DlqReason = string;

const dlqReasons = new Map<string, string>();

/**
 * Registers a layer's DLQ reasons (values lowercase `[a-z0-9_]`), so an upper layer adds
 * its own without editing the bus. Returns them frozen.
 * @throws KovaError INTERNAL for a malformed reason or one another layer defined (a programming error)
 */
export function defineDlqReasons<const T extends Record<string, string>>(layer: string, reasons: T): Readonly<T> {
  for (const reason of Object.values(reasons)) {
    if (!/^[a-z][a-z0-9_]*$/.test(reason)) throw new KovaError(ErrorCode.INTERNAL, `DLQ reason ${JSON.stringify(reason)}: use lowercase [a-z0-9_]`);
    const owner = dlqReasons.get(reason);
    if (owner !== undefined && owner !== layer) throw new KovaError(ErrorCode.INTERNAL, `DLQ reason ${reason} is already defined by ${owner}`);
    dlqReasons.set(reason, layer);
  }
  return Object.freeze(reasons);
}

/** Every DLQ reason the loaded layers define (for `kova dlq ls` and docs). */
export function knownDlqReasons(): string[] {
  return [...dlqReasons.keys()].sort();
}

/** The bus's own reasons: the message could not be read, or could not be delivered. */
export const DlqReason = defineDlqReasons("bus", {
  malformedMsgpack: "malformed_msgpack",
  invalidJson: "invalid_json",
  invalidEnvelope: "invalid_envelope",
  unknownType: "unknown_type",
  payloadTooLarge: "payload_too_large",
  expired: "expired",
  maxDeliver: "max_deliver",
  /** Addressed to an agent id nothing declared, for longer than the configured wait. */
  unknownAgent: "unknown_agent",
});
