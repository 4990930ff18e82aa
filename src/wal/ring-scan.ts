import { Unpackr } from "msgpackr";
import { crc32 } from "./crc32.js";
import { CRC_LEN, Flag, HEADER_FIXED, RECORD_MAGIC } from "./record-format.js";
import type { WalRecord } from "./types.js";

/**
 * A fast path for the recovery scan: an lmdb value decoder that reads each ring value
 * in place (lmdb hands decoders its shared read buffer when they declare that they
 * copy what they keep). A plain record (no cipher, no chain) is checked (CRC, layout)
 * without copying its bytes: a COMPLETE marker becomes a small summary, a PENDING
 * record its decoded WalRecord. Anything else is copied and goes through the full
 * parser. Used only when there is no key to check and no inspection detail to collect.
 */
export interface ScanSummary {
  readonly summary: true;
  readonly seq: number;
  readonly epoch: number;
  /** For a PENDING data record: the decoded record (its bytes were not kept). */
  readonly record?: WalRecord;
}

// Payload decoding from lmdb's shared buffer must copy binary data out of it.
const unpackr = new Unpackr({ useRecords: false, moreTypes: false, copyBuffers: true });

const PLAIN_MARKER_FLAGS = Flag.COMPLETE | Flag.MARKER;
const MARKER: { summary: true; seq: number; epoch: number } = { summary: true, seq: 0, epoch: 0 };

function plainPending(bytes: Buffer, n: number, seq: number): WalRecord | undefined {
  const kindLen = bytes[3]!;
  const ownerLen = bytes.readUInt16BE(16);
  const headerEnd = HEADER_FIXED + kindLen + ownerLen;
  const bodyEnd = headerEnd + bytes.readUInt32BE(18);
  if (bodyEnd + CRC_LEN !== n || kindLen === 0) return undefined;
  let payload: unknown;
  try {
    payload = unpackr.unpack(bytes.subarray(headerEnd, bodyEnd));
  } catch {
    return undefined; // the full parser reports it
  }
  const kind = bytes.toString("utf8", HEADER_FIXED, HEADER_FIXED + kindLen);
  const epoch = bytes.readUInt32BE(4);
  return ownerLen === 0
    ? { seq, epoch, kind, payload, status: "PENDING" }
    : { seq, epoch, kind, owner: bytes.toString("utf8", HEADER_FIXED + kindLen, headerEnd), payload, status: "PENDING" };
}

export const scanDecoder = {
  needsStableBuffer: false,
  encode(value: Buffer): Buffer {
    return value;
  },
  decode(bytes: Buffer, size?: number): Buffer | ScanSummary {
    const n = size ?? bytes.length;
    // Plain records of both formats share the layout; markers exist only in version 1.
    const version = bytes[1];
    if (
      n >= HEADER_FIXED + CRC_LEN &&
      bytes[0] === RECORD_MAGIC &&
      (version === 1 || version === 2) &&
      (bytes[2] === 0 || (bytes[2] === PLAIN_MARKER_FLAGS && version === 1)) &&
      bytes.readUInt32BE(n - CRC_LEN) === crc32(bytes.subarray(0, n - CRC_LEN))
    ) {
      const seq = bytes.readUInt32BE(8) * 2 ** 32 + bytes.readUInt32BE(12);
      if (Number.isSafeInteger(seq)) {
        if (bytes[2] === PLAIN_MARKER_FLAGS) {
          if (bytes.readUInt32BE(18) === 0 && HEADER_FIXED + bytes[3]! + bytes.readUInt16BE(16) + CRC_LEN === n) {
            // One shared object for every marker: the scan reads it before lmdb decodes
            // the next value, and a million small objects would be pure GC work.
            MARKER.seq = seq;
            MARKER.epoch = bytes.readUInt32BE(4);
            return MARKER;
          }
        } else if (doneFilter?.has(seq)) {
          // A data record a completion batch made COMPLETE: check its layout, skip its payload.
          if (HEADER_FIXED + bytes[3]! + bytes.readUInt16BE(16) + bytes.readUInt32BE(18) + CRC_LEN === n) {
            MARKER.seq = seq;
            MARKER.epoch = bytes.readUInt32BE(4);
            return MARKER;
          }
        } else {
          const record = plainPending(bytes, n, seq);
          if (record !== undefined) return { summary: true, seq, epoch: record.epoch, record };
        }
      }
    }
    return Buffer.from(bytes.subarray(0, n));
  },
};

/**
 * Seqs made COMPLETE by completion batches, consulted while lmdb decodes (so their
 * payloads are never decoded). Set only for the duration of one synchronous scan.
 */
let doneFilter: ReadonlySet<number> | undefined;

export function withDoneFilter<T>(done: ReadonlySet<number>, scan: () => T): T {
  doneFilter = done;
  try {
    return scan();
  } finally {
    doneFilter = undefined;
  }
}

export function isScanSummary(v: unknown): v is ScanSummary {
  return !Buffer.isBuffer(v) && typeof v === "object" && v !== null && (v as ScanSummary).summary === true;
}
