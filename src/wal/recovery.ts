import { decodePayload } from "./codec.js";
import { equalTags, ZERO_MAC } from "./crypto.js";
import { CipherId, MAC_LEN, ParsedRecord, parseRecord } from "./record-format.js";
import { openRecord, type OpenResult, type Security } from "./record-seal.js";
import type { Ring } from "./ring.js";
import { isScanSummary, withDoneFilter, type ScanSummary } from "./ring-scan.js";
import { openDone } from "./completion.js";
import type { ChainHead } from "./storage.js";
import type { ChainBreak, CorruptPolicy, CorruptRecord, WalRecord } from "./types.js";

/**
 * The recovery scan, as pure logic over stored entries so that `Wal.open`,
 * `kova wal verify` and the unit tests share it. It never throws on damaged data:
 * every entry ends up counted as complete, pending, corrupt or stale.
 */
export interface StoredEntry {
  key: number;
  /** Stored bytes, or a summary of a plain record already checked by the fast decoder. */
  value: Buffer | ScanSummary;
}

export interface ScanInput {
  /** Completion batches (read first: they decide which ring records are COMPLETE). */
  done: Iterable<{ key: number; value: Buffer }>;
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
  /** Fill `present` (every current-lap record, for inspect). */
  collect?: boolean;
}

/** A PENDING record found by the scan, with what the WAL needs to keep appending. */
export interface PendingFound {
  record: WalRecord;
  /** Stored bytes; undefined when the fast path decoded in place (re-read if needed). */
  bytes: Buffer | undefined;
  where: "ring" | "overflow";
  mac: Buffer | undefined;
  prevMac: Buffer | undefined;
  /** Set under `stop-owner` for records held back after a corrupt one of their owner. */
  withheld: boolean;
}

export interface CorruptFound extends CorruptRecord {
  where: "ring" | "overflow" | "done";
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
  /** Valid completion batches, in key order, with the highest seq each names. */
  doneBatches: Array<{ key: number; maxSeq: number }>;
  /** Sealed completion batches a tool without the key could not open (statuses unknown). */
  unreadBatches: number;
  /** With the chain: the overflow digest of every seq found in the overflow table. */
  overflowDigest: Buffer | undefined;
  /** Per current-lap seq: kind/owner/status, for inspect (only with `collect`). */
  present: Map<number, { slot: number; kind: string; owner: string | undefined; complete: boolean; epoch: number }>;
}

/** Authenticates one record; without any key there is nothing beyond the CRC to check. */
function authenticate(security: Security, plain: boolean, rec: ParsedRecord): OpenResult {
  if (plain && rec.cipher === CipherId.NONE && !rec.chained && rec.markerTag === undefined) return PLAIN_OK;
  return openRecord(security, rec);
}
const PLAIN_OK: OpenResult = { ok: true, plaintext: undefined };

export function scan(input: ScanInput): ScanResult {
  const { layout, security } = input;
  const plain = security.cipher === undefined && security.chain === undefined && security.unverified !== true;
  const corrupt: CorruptFound[] = [];

  // Completion batches first. A damaged one is reported and its seqs stay PENDING: they
  // are re-executed (at least once, the seq being the idempotency key), never lost.
  const done = new Set<number>();
  const doneBatches: Array<{ key: number; maxSeq: number }> = [];
  const doneKey = security.cipher?.doneKey ?? security.chain?.doneKey;
  let unreadBatches = 0;
  for (const { key, value } of input.done) {
    const batch = openDone(doneKey, value, security.unverified === true, security.sessions);
    if (batch.ok && batch.unread) {
      unreadBatches++;
      continue;
    }
    if (!batch.ok) {
      const seq = batch.seqs[0] ?? -1;
      corrupt.push({
        seq,
        slot: seq >= 0 ? layout.slotOf(seq) : -1,
        reason: `${batch.reason}; seqs ${batch.seqs.join(",") || "unknown"} stay PENDING`,
        where: "done",
        owner: undefined,
        bytes: value,
        key,
      });
      continue;
    }
    let maxSeq = 0;
    for (const seq of batch.seqs) {
      done.add(seq);
      if (seq > maxSeq) maxSeq = seq;
    }
    doneBatches.push({ key, maxSeq });
  }
  return withDoneFilter(done, () => ({ ...scanRecords(input, plain, corrupt, done, doneBatches), unreadBatches }));
}

function scanRecords(
  input: ScanInput,
  plain: boolean,
  corrupt: CorruptFound[],
  done: ReadonlySet<number>,
  doneBatches: Array<{ key: number; maxSeq: number }>,
): Omit<ScanResult, "unreadBatches"> {
  const { layout, security } = input;
  // Per valid ring record: plain number arrays, and the parsed object only when it is
  // still needed (data records, chain or inspect). A million retained objects would
  // cost more in GC than the scan itself.
  const keepAll = security.chain !== undefined || input.collect === true;
  const ringSeqArr: number[] = [];
  const ringEpochArr: number[] = [];
  const ringSlots: number[] = [];
  /** ParsedRecord, a WalRecord already decoded by the fast path, or nothing (COMPLETE). */
  const ringRecs: Array<ParsedRecord | WalRecord | undefined> = [];
  const ringPlain: Array<Buffer | undefined> = [];
  const ringDamaged: Array<{ slot: number; bytes: Buffer; reason: string; seq: number | undefined; owner: string | undefined }> = [];
  let head = 0;
  /** A valid chained record of format v2 exists: the head must then carry its tag. */
  let chainedV2 = false;

  // Authenticate before trusting any seq: a forged record with a recomputed CRC and a
  // huge seq must not make every genuine record look stale.
  for (const { key: slot, value } of input.ring) {
    if (isScanSummary(value)) {
      ringSeqArr.push(value.seq);
      ringEpochArr.push(value.epoch);
      ringSlots.push(slot);
      ringRecs.push(value.record);
      ringPlain.push(undefined);
      if (value.seq > head) head = value.seq;
      continue;
    }
    const parsed = parseRecord(value);
    if (!parsed.ok) {
      ringDamaged.push({ slot, bytes: value, reason: parsed.reason, seq: parsed.seq, owner: parsed.owner });
      continue;
    }
    const rec = parsed.record;
    const opened = authenticate(security, plain, rec);
    if (!opened.ok) {
      ringDamaged.push({ slot, bytes: value, reason: opened.reason, seq: rec.seq, owner: rec.owner });
      continue;
    }
    const keep = keepAll || !(rec.complete || done.has(rec.seq));
    if (rec.chained && rec.version >= 2) chainedV2 = true;
    ringSeqArr.push(rec.seq);
    ringEpochArr.push(rec.epoch);
    ringSlots.push(slot);
    ringRecs.push(keep ? rec : undefined);
    ringPlain.push(opened.plaintext);
    if (rec.seq > head) head = rec.seq;
  }

  let maxSeq = head;
  for (const d of ringDamaged) {
    // Trust the damaged header's seq only when it fits this slot and the current lap;
    // otherwise the seq this slot must hold is known from the ring position.
    const plausible = d.seq !== undefined && layout.slotOf(d.seq) === d.slot && d.seq > head - layout.size && d.seq <= head + layout.size;
    const seq = plausible ? d.seq! : layout.expectedSeq(d.slot, head);
    corrupt.push({ seq, slot: d.slot, reason: d.reason, where: "ring", owner: plausible ? d.owner : undefined, bytes: d.bytes, key: d.slot });
    if (seq > maxSeq) maxSeq = seq;
  }

  let complete = 0;
  let stale = 0;
  const chainOf = new Map<number, { prevMac: Buffer; mac: Buffer }>();
  const present: ScanResult["present"] = new Map();
  // PENDING candidates in seq order without sorting: overflow keys ascend and are all
  // older than the ring's lap; ring slots ascend, and the lap starts after head's slot.
  const recs: Array<ParsedRecord | WalRecord> = [];
  const slots: number[] = [];
  const plains: Array<Buffer | undefined> = [];
  const wheres: Array<"ring" | "overflow"> = [];

  const chain = security.chain;
  const overflowDigest = chain === undefined ? undefined : Buffer.alloc(MAC_LEN);
  for (const { key: seq, value: stored } of input.overflow) {
    const value = stored as Buffer; // overflow is always read as plain bytes
    if (overflowDigest !== undefined) {
      const share = chain!.overflowShare(seq);
      for (let i = 0; i < MAC_LEN; i++) overflowDigest[i]! ^= share[i]!;
    }
    const parsed = parseRecord(value);
    const opened = parsed.ok ? authenticate(security, plain, parsed.record) : undefined;
    if (!parsed.ok || !opened!.ok || parsed.record.seq !== seq) {
      const reason = !parsed.ok ? parsed.reason : !opened!.ok ? opened!.reason : `overflow key ${seq} holds seq ${parsed.record.seq}`;
      corrupt.push({ seq, slot: layout.slotOf(seq), reason, where: "overflow", owner: parsed.ok ? parsed.record.owner : parsed.owner, bytes: value, key: seq });
      if (seq > maxSeq) maxSeq = seq;
      continue;
    }
    if (seq > maxSeq) maxSeq = seq;
    if (parsed.record.chained && parsed.record.version >= 2) chainedV2 = true;
    if (parsed.record.epoch > input.epoch || layout.isCurrent(seq, layout.slotOf(seq), head)) {
      stale++; // a copy of a record the ring holds for the current lap, or from the future
      continue;
    }
    if (parsed.record.complete || done.has(seq)) complete++;
    else {
      recs.push(parsed.record);
      slots.push(layout.slotOf(seq));
      plains.push(opened!.plaintext);
      wheres.push("overflow");
    }
  }

  const headSlot = layout.slotOf(head);
  for (const pass of [0, 1]) {
    for (let i = 0; i < ringSlots.length; i++) {
      const slot = ringSlots[i]!;
      if ((pass === 0) !== slot > headSlot) continue;
      const seq = ringSeqArr[i]!;
      if (ringEpochArr[i]! > input.epoch || !layout.isCurrent(seq, slot, head)) {
        stale++;
        continue;
      }
      const r = ringRecs[i];
      if (r === undefined) {
        complete++; // COMPLETE (marker, or named by a completion batch): nothing more to know
        continue;
      }
      if (!(r instanceof ParsedRecord)) {
        recs.push(r); // decoded in place by the fast path
        slots.push(slot);
        plains.push(undefined);
        wheres.push("ring");
        continue;
      }
      if (r.chained) chainOf.set(r.seq, { prevMac: r.prevMac!, mac: r.mac! });
      const isComplete = r.complete || done.has(r.seq);
      if (input.collect) present.set(r.seq, { slot, kind: r.kind, owner: r.owner, complete: isComplete, epoch: r.epoch });
      if (isComplete) complete++;
      else {
        recs.push(r);
        slots.push(slot);
        plains.push(ringPlain[i]);
        wheres.push("ring");
      }
    }
  }
  let order = recs.map((_, i) => i);
  for (let i = 1; i < recs.length; i++) {
    if (recs[i - 1]!.seq >= recs[i]!.seq) {
      order = order.sort((a, b) => recs[a]!.seq - recs[b]!.seq); // not expected; stay correct anyway
      break;
    }
  }

  const pending: PendingFound[] = [];
  for (const i of order) {
    const rec = recs[i]!;
    const where = wheres[i]!;
    if (!(rec instanceof ParsedRecord)) {
      pending.push({ record: rec, bytes: undefined, where, mac: undefined, prevMac: undefined, withheld: false });
      continue;
    }
    const plaintext = plains[i];
    let payload: unknown;
    if (input.decode && (plaintext !== undefined || rec.cipher === CipherId.NONE)) {
      try {
        payload = decodePayload(plaintext ?? rec.body);
      } catch (err) {
        // msgpackr's messages may quote the data: never for an encrypted record (the
        // reason is stored in the clear in the quarantine and logged).
        const detail = rec.cipher !== CipherId.NONE ? "" : `: ${err instanceof Error ? err.message : String(err)}`;
        const reason = `payload does not decode${detail}`;
        corrupt.push({ seq: rec.seq, slot: slots[i]!, reason, where, owner: rec.owner, bytes: rec.bytes, key: where === "ring" ? slots[i]! : rec.seq });
        continue;
      }
    }
    const owner = rec.owner;
    const record: WalRecord =
      owner === undefined
        ? { seq: rec.seq, epoch: rec.epoch, kind: rec.kind, payload, status: "PENDING" }
        : { seq: rec.seq, epoch: rec.epoch, kind: rec.kind, owner, payload, status: "PENDING" };
    pending.push({ record, bytes: rec.bytes, where, mac: rec.mac, prevMac: rec.prevMac, withheld: false });
  }
  corrupt.sort((a, b) => a.seq - b.seq);

  const { kept, withheld } = applyPolicy(input.policy, pending, corrupt);
  const chainBreaks: ChainBreak[] = [];
  // Without the chain there is nothing to authenticate the head with (it is written only with it).
  let trustedHead = input.head;
  if (chain !== undefined) {
    const verdict = judgeHead(input, head, chainedV2, overflowDigest!);
    trustedHead = verdict.trusted;
    chainBreaks.push(...checkChain(layout, head, chainOf, corrupt, input, trustedHead), ...verdict.breaks);
  }
  let headMac = chainOf.get(head)?.mac;
  if (trustedHead !== undefined && trustedHead.seq >= maxSeq) headMac = Buffer.from(trustedHead.mac, "hex");
  if (chain !== undefined && headMac === undefined) headMac = ZERO_MAC;
  if (trustedHead !== undefined && trustedHead.seq > maxSeq) maxSeq = trustedHead.seq;
  return { complete, pending: kept, withheld, corrupt, stale, chainBreaks, maxSeq, head, headMac, present, doneBatches, overflowDigest };
}

/** `stop-owner`: an owner's PENDING records after its first corrupt record are withheld. */
function applyPolicy(policy: CorruptPolicy, pending: PendingFound[], corrupt: CorruptFound[]): { kept: PendingFound[]; withheld: PendingFound[] } {
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
    if (p.record.seq > stop) {
      p.withheld = true;
      withheld.push(p);
    } else kept.push(p);
  }
  return { kept, withheld };
}

/**
 * The chain head authenticates itself (ChainKey.headTag over seq, mac and overflow
 * digest): without it, someone who deletes the newest records could write back the
 * head of the newest survivor (its seq and mac are in the record) and the chain would
 * look whole. A head that is missing while chained records exist, fails its tag, or
 * has no tag while version-2 records exist (heads of v1 WALs had none) is not trusted;
 * a trusted head's overflow digest must match the overflow table, or an overflow record
 * (a PENDING one, by construction) was deleted or added.
 */
function judgeHead(input: ScanInput, head: number, chainedV2: boolean, overflowFound: Buffer): { trusted: ChainHead | undefined; breaks: ChainBreak[] } {
  const h = input.head;
  const chain = input.security.chain!;
  if (h === undefined) {
    return { trusted: undefined, breaks: head > 0 ? [{ seq: head, reason: "the chain head is missing (deleted?)" }] : [] };
  }
  if (h.tag === undefined) {
    if (!chainedV2) return { trusted: h, breaks: [] }; // a head written before heads had tags
    return { trusted: undefined, breaks: [{ seq: h.seq, reason: "the chain head has no tag (rewritten without the key?)" }] };
  }
  const stored = Buffer.from(h.overflow ?? "", "hex");
  if (stored.length !== MAC_LEN || !equalTags(Buffer.from(h.tag, "hex"), chain.headTag(h.seq, Buffer.from(h.mac, "hex"), stored))) {
    return {
      trusted: undefined,
      breaks: [{ seq: h.seq, reason: "the chain head fails authentication (rewritten, e.g. after truncating the newest records?)" }],
    };
  }
  if (!equalTags(stored, overflowFound)) {
    return { trusted: h, breaks: [{ seq: h.seq, reason: "the overflow table does not match the chain head (an overflow record was deleted or added)" }] };
  }
  return { trusted: h, breaks: [] };
}

/**
 * Every seq of the current lap must be present and link to its predecessor; the
 * trusted head (written in the same transaction as each append) catches a truncated tail.
 */
function checkChain(
  layout: Ring,
  head: number,
  chainOf: Map<number, { prevMac: Buffer; mac: Buffer }>,
  corrupt: CorruptFound[],
  input: ScanInput,
  trustedHead: ChainHead | undefined,
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
  const h = trustedHead;
  if (h !== undefined) {
    if (h.seq > head && !damaged.has(h.seq) && !input.quarantined.has(h.seq)) {
      breaks.push({ seq: head + 1, reason: `truncated: the chain head is seq ${h.seq} but the newest record is ${head}` });
    } else if (h.seq === head && head > 0 && chainOf.has(head) && !equalTags(chainOf.get(head)!.mac, Buffer.from(h.mac, "hex"))) {
      breaks.push({ seq: head, reason: "newest record does not match the chain head" });
    }
  }
  return breaks;
}
