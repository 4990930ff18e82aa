import { ErrorCode, KovaError, isValidId } from "../core/index.js";

/**
 * The processed-ids window of a checkpoint (its `processed` field, format v2), packed:
 * each id is a UUID in canonical form (what `newId` makes) as a 0 byte and its 16 bytes,
 * or any other id (ASCII, 1–128 characters: `ID_PATTERN`) as its length byte and its
 * characters. 17 bytes per UUID instead of 39 of JSON.
 *
 * Why: a checkpoint is written with every turn, and a busy actor's window is full (1,000
 * ids by default). Encoding 1,000 strings to JSON for NATS and to msgpack for the WAL cost
 * about 0.6 ms per turn on the bench machine (docs/benchmarks.md). Packed, a turn's window
 * is the previous one's bytes minus its first entry plus the new id (`extendIds`): a
 * memory copy, never a re-encoding of the whole window.
 */

/** The packed form of each window array made or read here; windows are never mutated. */
const packedOf = new WeakMap<readonly string[], Buffer>();

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const UUID_TAG = 0;
const UUID_BYTES = 16;
const MAX_ID_LENGTH = 128;

/** A checkpoint's packed processed ids that cannot be read back (corrupt or truncated bytes). */
export class CorruptProcessedIdsError extends KovaError {
  constructor(what: string, detail: string) {
    super(ErrorCode.UNSUPPORTED_FORMAT, `${what}: its processed ids cannot be read (${detail}); the checkpoint is damaged`, { data: { what } });
  }
}

function packOne(id: string): Buffer {
  if (UUID.test(id)) {
    const b = Buffer.allocUnsafe(1 + UUID_BYTES);
    b[0] = UUID_TAG;
    b.write(id.replaceAll("-", ""), 1, "hex");
    return b;
  }
  if (id.length < 1 || id.length > MAX_ID_LENGTH) throw new RangeError(`an envelope id has 1 to ${MAX_ID_LENGTH} characters, got ${id.length}`);
  const b = Buffer.allocUnsafe(1 + id.length);
  b[0] = id.length;
  b.write(id, 1, "latin1");
  return b;
}

function entryLength(packed: Uint8Array, at: number): number {
  const tag = packed[at]!;
  return 1 + (tag === UUID_TAG ? UUID_BYTES : tag);
}

/** The packed bytes of a window (computed once per array). */
export function packIds(ids: readonly string[]): Buffer {
  let packed = packedOf.get(ids);
  if (!packed) {
    packed = Buffer.concat(ids.map(packOne));
    packedOf.set(ids, packed);
  }
  return packed;
}

/** The packed bytes of the newest `count` ids of a window (a view of its packed form, not a copy). */
export function packedTail(ids: readonly string[], count: number): Buffer {
  const packed = packIds(ids);
  let from = 0;
  for (let i = ids.length - Math.min(count, ids.length); i > 0; i--) from += entryLength(packed, from);
  return packed.subarray(from);
}

/** The window after `id`: at most `window` ids, newest last; a new array, packed incrementally from `ids`' bytes. */
export function extendIds(ids: readonly string[], id: string, window: number): readonly string[] {
  const drop = Math.max(0, ids.length + 1 - window);
  const packed = packIds(ids);
  let from = 0;
  for (let i = 0; i < drop; i++) from += entryLength(packed, from);
  const next = [...ids.slice(drop), id];
  packedOf.set(next, Buffer.concat([packed.subarray(from), packOne(id)]));
  return next;
}

/**
 * Reads packed ids (`what` names the checkpoint for the error).
 * @throws CorruptProcessedIdsError for bytes that do not parse
 */
export function unpackIds(bytes: Uint8Array, what: string): readonly string[] {
  const packed = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const ids: string[] = [];
  for (let at = 0; at < packed.length; ) {
    const tag = packed[at]!;
    const end = at + entryLength(packed, at);
    if (end > packed.length) throw new CorruptProcessedIdsError(what, `entry ${ids.length} runs past the end at byte ${at}`);
    if (tag === UUID_TAG) {
      const h = packed.toString("hex", at + 1, end);
      ids.push(`${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`);
    } else {
      if (tag > MAX_ID_LENGTH) throw new CorruptProcessedIdsError(what, `entry ${ids.length} claims ${tag} characters`);
      const id = packed.toString("latin1", at + 1, end);
      if (!isValidId(id)) throw new CorruptProcessedIdsError(what, `entry ${ids.length} is not an id`);
      ids.push(id);
    }
    at = end;
  }
  packedOf.set(ids, Buffer.from(packed));
  return ids;
}
