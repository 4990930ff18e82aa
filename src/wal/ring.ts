/**
 * Ring arithmetic: 2^k slots, slot = seq mod 2^k. Seqs may pass 2^32, so this uses
 * modulo rather than a 32-bit mask.
 */
export class Ring {
  readonly size: number;

  constructor(readonly bits: number) {
    if (!Number.isInteger(bits) || bits < 1 || bits > 24) throw new RangeError(`ringBits must be 1-24, got ${bits}`);
    this.size = 2 ** bits;
  }

  slotOf(seq: number): number {
    return seq % this.size;
  }

  /** The oldest seq the ring can still hold when `head` is the newest. */
  windowStart(head: number): number {
    return Math.max(1, head - this.size + 1);
  }

  /** The seq that should occupy `slot` when `head` is the newest seq (0 if none yet). */
  expectedSeq(slot: number, head: number): number {
    const s = head - ((((head - slot) % this.size) + this.size) % this.size);
    return s >= 1 ? s : 0;
  }

  /**
   * True when a valid record found in `slot` belongs to the current lap. A record from
   * an earlier lap (or in the wrong slot) is stale: its slot has been legitimately
   * reused, or it was put back from an old copy, and it must never be returned as data.
   */
  isCurrent(seq: number, slot: number, head: number): boolean {
    return this.slotOf(seq) === slot && seq > head - this.size && seq <= head;
  }
}
