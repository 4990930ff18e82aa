import { existsSync } from "node:fs";
import { join } from "node:path";
import { ArgumentError } from "../core/index.js";
import type { CipherAlgorithm } from "./crypto.js";
import { resolveSecurity } from "./keys.js";
import { decodePayload } from "./codec.js";
import { parseRecord } from "./record-format.js";
import { openRecord, type Security } from "./record-seal.js";
import { scan, type ScanResult, type StoredEntry } from "./recovery.js";
import { Ring } from "./ring.js";
import { WalStorage, type WalMeta } from "./storage.js";
import type { ChainBreak, CorruptRecord } from "./types.js";

/**
 * Read-only views of a WAL directory for `kova wal inspect` and `kova wal verify`.
 * They open LMDB read-only, never bump the epoch and never quarantine: running them
 * next to a live node is safe.
 */
export interface OfflineKeys {
  /** Encryption key material (algorithm comes from the WAL's meta). */
  key?: Buffer | string;
  hmacKey?: Buffer | string;
}

export interface WalInspection {
  dir: string;
  format: number;
  ringBits: number;
  epoch: number;
  encryption: string | undefined;
  hmac: boolean;
  /** Oldest and newest seq present (0 when empty). */
  tail: number;
  head: number;
  counts: { pending: number; complete: number; corrupt: number; stale: number; overflow: number; quarantined: number };
  /**
   * Newest last. Without the key of an encrypted WAL, `kind` is "(sealed)", no owner is
   * known, and a status that only an encrypted completion batch could tell is "UNKNOWN"
   * (such records are counted as pending).
   */
  records: Array<{
    seq: number;
    slot: number;
    status: "PENDING" | "COMPLETE" | "UNKNOWN";
    kind: string;
    owner?: string;
    epoch: number;
    where: "ring" | "overflow";
  }>;
  corrupt: CorruptRecord[];
  /** True when records were read without their keys (nothing authenticated). */
  unverified: boolean;
  /** What could not be checked or read without keys. */
  notes: string[];
}

export interface WalVerification {
  ok: boolean;
  checked: number;
  corrupt: CorruptRecord[];
  chainBreaks: ChainBreak[];
  /** What could not be checked (e.g. authentication without a key). */
  notes: string[];
}

function openReadOnly(dir: string): { storage: WalStorage; meta: WalMeta } {
  if (!existsSync(join(dir, "data.mdb"))) throw new ArgumentError("dir", `no WAL in ${dir} (data.mdb missing): give a node's WAL directory, <data_dir>/wal`);
  const storage = WalStorage.open(dir, undefined, true);
  const meta = storage.readMeta();
  if (meta === undefined) {
    void storage.close();
    throw new ArgumentError("dir", `${dir} is an LMDB environment but not a Kova WAL (no meta): give a node's WAL directory, <data_dir>/wal`);
  }
  return { storage, meta };
}

function securityFor(storage: WalStorage, meta: WalMeta, keys: OfflineKeys): { security: Security; notes: string[] } {
  const notes: string[] = [];
  const options: { encryption?: { algorithm: CipherAlgorithm; key: Buffer | string }; hmac?: { key: Buffer | string } } = {};
  if (meta.cipher !== undefined && keys.key !== undefined) {
    options.encryption = { algorithm: meta.cipher.algorithm as CipherAlgorithm, key: keys.key };
  } else if (meta.cipher !== undefined) notes.push(`encrypted with ${meta.cipher.algorithm}: authentication not checked (no --key)`);
  if (meta.chain !== undefined && keys.hmacKey !== undefined) options.hmac = { key: keys.hmacKey };
  else if (meta.chain !== undefined) notes.push("HMAC chain not checked (no --hmac-key)");
  // resolveSecurity throws WAL_BAD_KEY for a wrong key; a missing one only lowers what is checked.
  const { security } = resolveSecurity(
    options,
    {
      ...meta,
      ...(options.encryption === undefined ? { cipher: undefined } : {}),
      ...(options.hmac === undefined ? { chain: undefined } : {}),
    },
    (epoch) => storage.readOpenSalt(epoch),
  );
  return { security: { ...security, unverified: notes.length > 0 }, notes };
}

/** lmdb's range entries already have the shape the scan reads (keys are numbers here). */
function entries(range: Iterable<{ key: unknown; value: unknown }>): Iterable<StoredEntry> {
  return range as Iterable<StoredEntry>;
}

interface OfflineScan {
  meta: WalMeta;
  result: ScanResult;
  quarantined: CorruptRecord[];
  notes: string[];
  overflow: number;
}

/**
 * Scans the WAL read-only. `visit` runs while the environment is still open (to read record
 * bytes the scan did not keep); `decode` also decodes the PENDING records' payloads.
 */
function run(dir: string, keys: OfflineKeys): OfflineScan;
function run<T>(dir: string, keys: OfflineKeys, opts: { decode: boolean; visit: (scanned: OfflineScan, storage: WalStorage, security: Security) => T }): T;
function run<T>(
  dir: string,
  keys: OfflineKeys,
  opts?: { decode: boolean; visit: (scanned: OfflineScan, storage: WalStorage, security: Security) => T },
): OfflineScan | T {
  const { storage, meta } = openReadOnly(dir);
  try {
    const { security, notes } = securityFor(storage, meta, keys);
    const quarantined: CorruptRecord[] = [];
    for (const { value } of storage.corrupt.getRange({})) {
      quarantined.push({ seq: value.seq ?? -1, slot: value.slot ?? -1, reason: `quarantined: ${value.reason}`, where: value.where });
    }
    const overflow = storage.overflow.getCount();
    const result = scan({
      done: storage.done.getRange({}) as Iterable<{ key: number; value: Buffer }>,
      ring: entries(storage.ring.getRange({})),
      overflow: entries(storage.overflow.getRange({})),
      layout: new Ring(meta.ringBits),
      security,
      epoch: meta.epoch,
      head: security.chain !== undefined ? storage.readHead() : undefined,
      quarantined: new Set(quarantined.map((q) => q.seq)),
      policy: "skip",
      decode: opts?.decode ?? false,
      collect: true,
    });
    if (result.unreadBatches > 0) notes.push(`${result.unreadBatches} completion batches are encrypted: record statuses are unknown without --key`);
    const scanned = { meta, result, quarantined, notes, overflow };
    return opts === undefined ? scanned : opts.visit(scanned, storage, security);
  } finally {
    void storage.close();
  }
}

/**
 * Summarises a WAL: records with status, head/tail, epoch.
 * @throws ArgumentError (INVALID_ARGUMENT) when `dir` holds no WAL; WalBadKeyError on a wrong key
 */
export function inspectWal(dir: string, keys: OfflineKeys = {}): WalInspection {
  const { meta, result, quarantined, notes, overflow } = run(dir, keys);
  const records: WalInspection["records"] = [];
  const open = result.unreadBatches > 0 ? "UNKNOWN" : "PENDING";
  for (const [seq, p] of result.present) {
    const r: WalInspection["records"][number] = { seq, slot: p.slot, status: p.complete ? "COMPLETE" : open, kind: p.kind, epoch: p.epoch, where: "ring" };
    if (p.owner !== undefined) r.owner = p.owner;
    records.push(r);
  }
  for (const p of result.pending) {
    if (p.where !== "overflow") continue;
    const r: WalInspection["records"][number] = { seq: p.record.seq, slot: -1, status: open, kind: p.record.kind, epoch: p.record.epoch, where: "overflow" };
    if (p.record.owner !== undefined) r.owner = p.record.owner;
    records.push(r);
  }
  records.sort((a, b) => a.seq - b.seq);
  const corrupt = [...quarantined, ...result.corrupt.map((c) => ({ seq: c.seq, slot: c.slot, reason: c.reason, where: c.where }))];
  return {
    dir,
    format: meta.format,
    ringBits: meta.ringBits,
    epoch: meta.epoch,
    encryption: meta.cipher?.algorithm,
    hmac: meta.chain !== undefined,
    tail: records[0]?.seq ?? 0,
    head: records.at(-1)?.seq ?? 0,
    counts: {
      pending: result.pending.length,
      complete: result.complete,
      corrupt: result.corrupt.length,
      stale: result.stale,
      overflow,
      quarantined: quarantined.length,
    },
    records,
    corrupt,
    unverified: notes.length > 0,
    notes,
  };
}

/**
 * Checks every record's CRC32, authentication (with the keys given) and the HMAC
 * chain. `ok` is false when anything is corrupt, quarantined or the chain breaks.
 * @throws ArgumentError (INVALID_ARGUMENT) when `dir` holds no WAL; WalBadKeyError on a wrong key
 */
export function verifyWal(dir: string, keys: OfflineKeys = {}): WalVerification {
  const { result, quarantined, notes } = run(dir, keys);
  const corrupt = [...quarantined, ...result.corrupt.map((c) => ({ seq: c.seq, slot: c.slot, reason: c.reason, where: c.where }))];
  corrupt.sort((a, b) => a.seq - b.seq);
  return {
    ok: corrupt.length === 0 && result.chainBreaks.length === 0,
    checked: result.present.size + result.pending.filter((p) => p.where === "overflow").length + result.stale + result.corrupt.length,
    corrupt,
    chainBreaks: result.chainBreaks,
    notes,
  };
}

/** A record still in the WAL, decoded. */
export interface WalRecordRead {
  seq: number;
  status: "PENDING" | "COMPLETE";
  kind: string;
  owner?: string;
  payload: unknown;
}

/**
 * The records a WAL still holds, decoded: every PENDING one, and the COMPLETE ones whose
 * slot the ring has not reused yet. What `kova wal replay` replays. Read-only, as inspect.
 * @param filter only records of this kind and/or owner
 * @throws ArgumentError (INVALID_ARGUMENT) when `dir` holds no WAL, or holds an encrypted one
 *   and no key was given; WalBadKeyError on a wrong key
 */
export function readWalRecords(dir: string, keys: OfflineKeys = {}, filter: { kind?: string; owner?: string } = {}): WalRecordRead[] {
  return run(dir, keys, {
    decode: true,
    visit: ({ meta, result }, storage, security) => {
      if (meta.cipher !== undefined && keys.key === undefined) {
        throw new ArgumentError("--key-env", `the WAL in ${dir} is encrypted with ${meta.cipher.algorithm}: give its key to read the records`);
      }
      const wanted = (kind: string, owner: string | undefined) =>
        (filter.kind === undefined || kind === filter.kind) && (filter.owner === undefined || owner === filter.owner);
      const out: WalRecordRead[] = [];
      for (const p of result.pending) {
        const r = p.record;
        if (!wanted(r.kind, r.owner) || r.payload === undefined) continue;
        out.push({ seq: r.seq, status: "PENDING", kind: r.kind, ...(r.owner === undefined ? {} : { owner: r.owner }), payload: r.payload });
      }
      for (const [seq, p] of result.present) {
        if (!p.complete || !wanted(p.kind, p.owner)) continue;
        const bytes = storage.ring.get(p.slot);
        const parsed = bytes === undefined ? undefined : parseRecord(bytes);
        if (parsed === undefined || !parsed.ok || parsed.record.seq !== seq) continue;
        const opened = openRecord(security, parsed.record);
        if (!opened.ok) continue;
        const payload = decodePayload(opened.plaintext ?? parsed.record.body);
        out.push({ seq, status: "COMPLETE", kind: p.kind, ...(p.owner === undefined ? {} : { owner: p.owner }), payload });
      }
      return out.sort((a, b) => a.seq - b.seq);
    },
  });
}
