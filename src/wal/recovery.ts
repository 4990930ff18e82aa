import { decodePayload } from "./codec.js";
import { equalTags, ZERO_MAC } from "./crypto.js";
import { parseRecord, type ParsedRecord } from "./record-format.js";
import { openRecord, type Security } from "./record-seal.js";
import type { Ring } from "./ring.js";
import type { ChainHead } from "./storage.js";
import type { ChainBreak, CorruptPolicy, CorruptRecord, WalRecord } from "./types.js";

/**
 * The recovery scan, as pure logic over stored entries so that `Wal.open`,
 * `kova wal verify` and the unit tests share it. It never throws on damaged data:
 * every entry ends up counted as complete, pending, corrupt or stale.
 */
export interface StoredEntry {
  key: number;
  value: Buffer;
}

export interface ScanInput {
  ring: Iterable<StoredEntry>;
  overflow: Iterable<StoredEntry>;
  layout: Ring;
  security: Security;
  /** The epoch of this open; a record claiming a later one is stale. */
  epoch: number;
  head: ChainHead | undefined;
  /** Seqs already quarantined by an earlier open (not "missing" for the chain). */
  quarantined: ReadonlySet<number>;
  policy: CorruptPolicy;
  /** Decode pending payloads (false for inspect, which only counts). */
  decode: boolean;
}

/** A PENDING record found by the scan, with what the WAL needs to keep appending. */
export interface PendingFound {
  record: WalRecord;
  bytes: Buffer;
  where: "ring" | "overflow";
  mac: Buffer | undefined;
  prevMac: Buffer | undefined;
}

export interface CorruptFound extends CorruptRecord {
  where: "ring" | "overflow";
  owner: string | undefined;
  bytes: Buffer;
  key: number;
}

export interface ScanResult {
  complete: number;
  pending: PendingFound[];
  withheld: PendingFound[];
  corrupt: CorruptFound[];
  stale: number;
  chainBreaks: ChainBreak[];
  /** Highest seq seen anywhere (valid or damaged); the next append uses head + 1. */
  maxSeq: number;
  /** The newest valid record in the ring (0 when empty). */
  head: number;
  /** Chain mac of the newest record, for linking the next append. */
  headMac: Buffer | undefined;
  /** Per current-lap seq: kind/owner/status, for inspect. */
  present: Map<number, { slot: number; kind: string; owner: string | undefined; complete: boolean; epoch: number }>;
}

interface Valid {
  rec: ParsedRecord;
  plaintext: Buffer | undefined;
  slot: number;
  bytes: Buffer;
}

export function scan(input: ScanInput): ScanResult {
  const { layout, security } = input;
  const corrupt: CorruptFound[] = [];
  const ringValid: Valid[] = [];
  const ringDamaged: Array<{ slot: number; bytes: Buffer; reason: string; seq: number | undefined; owner: string | undefined }> = [];
  let head = 0;

  // Authenticate before trusting any seq: a forged record with a recomputed CRC and a
  // huge seq must not make every genuine record look stale.
  for (const { key: slot, value } of input.ring) {
    const parsed = parseRecord(value);
    if (!parsed.ok) {
      ringDamaged.push({ slot, bytes: value, reason: parsed.reason, seq: parsed.seq, owner: parsed.owner });
      continue;
    }
    const opened = openRecord(security, parsed.record);
    if (!opened.ok) {
      ringDamaged.push({ slot, bytes: value, reason: opened.reason, seq: parsed.record.seq, owner: parsed.record.owner });
      continue;
    }
    ringValid.push({ rec: parsed.record, plaintext: opened.plaintext, slot, bytes: value });
    if (parsed.record.seq > head) head = parsed.record.seq;
  }

  let maxSeq = head;
  for (const d of ringDamaged) {
    // Trust the damaged header's seq only when it fits this slot and the current lap;
    // otherwise the seq this slot must hold is known from the ring position.
    const plausible =
      d.seq !== undefined && layout.slotOf(d.seq) === d.slot && d.seq > head - layout.size && d.seq <= head + layout.size;
    const seq = plausible ? d.seq! : layout.expectedSeq(d.slot, head);
    corrupt.push({ seq, slot: d.slot, reason: d.reason, where: "ring", owner: plausible ? d.owner : undefined, bytes: d.bytes, key: d.slot });
    if (seq > maxSeq) maxSeq = seq;
  }

  let complete = 0;
  let stale = 0;
  const candidates: Array<{ v: Valid; where: "ring" | "overflow" }> = [];
  const chainOf = new Map<number, { prevMac: Buffer; mac: Buffer }>();
  const present: ScanResult["present"] = new Map();
  for (const v of ringValid) {
    const r = v.rec;
    if (r.epoch > input.epoch || !layout.isCurrent(r.seq, v.slot, head)) {
      stale++;
      continue;
    }
    if (r.prevMac !== undefined && r.mac !== undefined) chainOf.set(r.seq, { prevMac: r.prevMac, mac: r.mac });
    present.set(r.seq, { slot: v.slot, kind: r.kind, owner: r.owner, complete: r.complete, epoch: r.epoch });
    if (r.complete) complete++;
    else candidates.push({ v, where: "ring" });
  }

  const ringSeqs = new Set(present.keys());
  for (const { key: seq, value } of input.overflow) {
    const parsed = parseRecord(value);
    const opened = parsed.ok ? openRecord(security, parsed.record) : undefined;
    if (!parsed.ok || !opened!.ok || parsed.record.seq !== seq) {
      const reason = !parsed.ok ? parsed.reason : !opened!.ok ? opened!.reason : `overflow key ${seq} holds seq ${parsed.record.seq}`;
      corrupt.push({ seq, slot: layout.slotOf(seq), reason, where: "overflow", owner: parsed.ok ? parsed.record.owner : parsed.owner, bytes: value, key: seq });
      if (seq > maxSeq) maxSeq = seq;
      continue;
    }
    if (seq > maxSeq) maxSeq = seq;
    if (ringSeqs.has(seq) || parsed.record.epoch > input.epoch) {
      stale++;
      continue;
    }
    if (parsed.record.complete) complete++;
    else candidates.push({ v: { rec: parsed.record, plaintext: opened!.plaintext, slot: layout.slotOf(seq), bytes: value }, where: "overflow" });
  }

  candidates.sort((a, b) => a.v.rec.seq - b.v.rec.seq);
  const pending: PendingFound[] = [];
  for (const { v, where } of candidates) {
    let payload: unknown;
    if (input.decode && v.plaintext !== undefined) {
      try {
        payload = decodePayload(v.plaintext);
      } catch (err) {
        const reason = `payload does not decode: ${err instanceof Error ? err.message : String(err)}`;
        corrupt.push({ seq: v.rec.seq, slot: v.slot, reason, where, owner: v.rec.owner, bytes: v.bytes, key: where === "ring" ? v.slot : v.rec.seq });
        continue;
      }
    }
    const record: WalRecord = { seq: v.rec.seq, epoch: v.rec.epoch, kind: v.rec.kind, payload, status: "PENDING" };
    if (v.rec.owner !== undefined) record.owner = v.rec.owner;
    pending.push({ record, bytes: v.bytes, where, mac: v.rec.mac, prevMac: v.rec.prevMac });
  }
  corrupt.sort((a, b) => a.seq - b.seq);

  const { kept, withheld } = applyPolicy(input.policy, pending, corrupt);
  const chainBreaks = security.chain !== undefined ? checkChain(layout, head, chainOf, corrupt, input) : [];
  let headMac = chainOf.get(head)?.mac;
  if (input.head !== undefined && input.head.seq >= maxSeq) headMac = Buffer.from(input.head.mac, "hex");
  if (security.chain !== undefined && headMac === undefined) headMac = ZERO_MAC;
  if (input.head !== undefined && input.head.seq > maxSeq) maxSeq = input.head.seq;
  return { complete, pending: kept, withheld, corrupt, stale, chainBreaks, maxSeq, head, headMac, present };
}

/** `stop-owner`: an owner's PENDING records after its first corrupt record are withheld. */
function applyPolicy(
  policy: CorruptPolicy,
  pending: PendingFound[],
  corrupt: CorruptFound[],
): { kept: PendingFound[]; withheld: PendingFound[] } {
  if (policy === "skip" || corrupt.length === 0) return { kept: pending, withheld: [] };
  const firstByOwner = new Map<string, number>();
  let firstUnknown = Infinity; // a corrupt record whose owner is unreadable stops every owner
  for (const c of corrupt) {
    if (c.owner === undefined) firstUnknown = Math.min(firstUnknown, c.seq);
    else if (!firstByOwner.has(c.owner)) firstByOwner.set(c.owner, c.seq);
  }
  const kept: PendingFound[] = [];
  const withheld: PendingFound[] = [];
  for (const p of pending) {
    const stop = Math.min(firstUnknown, p.record.owner === undefined ? Infinity : (firstByOwner.get(p.record.owner) ?? Infinity));
    (p.record.seq > stop ? withheld : kept).push(p);
  }
  return { kept, withheld };
}

/**
 * Every seq of the current lap must be present and link to its predecessor; the meta
 * head (written in the same transaction as each append) catches a truncated tail.
 */
function checkChain(
  layout: Ring,
  head: number,
  chainOf: Map<number, { prevMac: Buffer; mac: Buffer }>,
  corrupt: CorruptFound[],
  input: ScanInput,
): ChainBreak[] {
  const breaks: ChainBreak[] = [];
  const damaged = new Set(corrupt.map((c) => c.seq));
  for (let s = layout.windowStart(head); s <= head; s++) {
    const link = chainOf.get(s);
    if (link === undefined) {
      if (!damaged.has(s) && !input.quarantined.has(s)) breaks.push({ seq: s, reason: "record missing (deleted or moved)" });
      continue;
    }
    const prev = chainOf.get(s - 1);
    if (prev !== undefined && !equalTags(prev.mac, link.prevMac)) {
      breaks.push({ seq: s, reason: "chain link does not match the previous record (reordered or replaced)" });
    }
  }
  const h = input.head;
  if (h !== undefined) {
    if (h.seq > head && !damaged.has(h.seq) && !input.quarantined.has(h.seq)) {
      breaks.push({ seq: head + 1, reason: `truncated: the chain head is seq ${h.seq} but the newest record is ${head}` });
    } else if (h.seq === head && head > 0 && chainOf.has(head) && !equalTags(chainOf.get(head)!.mac, Buffer.from(h.mac, "hex"))) {
      breaks.push({ seq: head, reason: "newest record does not match the chain head" });
    }
  }
  return breaks;
}
