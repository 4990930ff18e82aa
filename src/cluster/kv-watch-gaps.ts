import type { JetStreamManager, MsgRequest } from "@nats-io/jetstream";
import { isPermissionDenied } from "../bus/index.js";
import type { Logger } from "../core/index.js";

/** Gaps waiting for their check beyond which a watch is resumed without checking. */
const MAX_GAPS = 1000;

/** What the gap checker needs from the mirror whose watch it checks. */
export interface WatchGapHost {
  /** Whether watch `gen` is still the mirror's watch: gaps of a replaced or stopped one are dropped. */
  isCurrent(gen: number): boolean;
  /** The watch skipped a stored message: resume it at revision `from`. */
  skipped(from: number, detail: string): void;
  /** A gap could not be checked: restart the watch from a snapshot. */
  checkFailed(): void;
}

/**
 * Verifies the gaps in what a KV watch delivers, for a bucket with one value per key.
 *
 * There a gap is normal when its revisions were overwritten before the watch got to
 * them, and a skip when one of them still exists: a KV purge (a rollup) on nats-server
 * before 2.10.11 moves every lagging consumer of the bucket to the purge marker, past
 * other keys' writes stored just before it, and later revisions keep arriving, so no
 * revision check notices. Gaps are checked one at a time, in order, with STREAM.MSG.GET
 * `next_by_subj` (nats-server 2.9+; nats.js types only `seq` and `last_by_subj`): the
 * bucket's first message after the gap's start, if below the gap's end, was skipped.
 * Past MAX_GAPS waiting (a watch far behind a flood of overwrites) the watch is resumed
 * from the oldest gap without checking.
 */
export class WatchGapChecker {
  private enabled = false;
  /** The server refused a check (permissions): they stay off. */
  private refused = false;
  private stream = "";
  private subjects = "";
  /** Revisions `after`+1 … `next`-1 of watch `gen` did not arrive. */
  private gaps: Array<{ gen: number; after: number; next: number }> = [];
  private checking = false;

  constructor(
    private readonly jsm: JetStreamManager,
    private readonly logger: Logger,
    private readonly host: WatchGapHost,
  ) {}

  /** Read at each watch's start: the bucket's stream, and whether it keeps one value per key. */
  configure(stream: string, subjects: string, onePerKey: boolean): void {
    this.stream = stream;
    this.subjects = subjects;
    this.enabled = onePerKey;
  }

  add(gen: number, after: number, next: number): void {
    if (!this.enabled || this.refused) return;
    this.gaps.push({ gen, after, next });
    if (this.gaps.length > MAX_GAPS) {
      const oldest = this.gaps.find((g) => this.host.isCurrent(g.gen));
      this.gaps = [];
      if (oldest) this.host.skipped(oldest.after + 1, "too many gaps to check");
      return;
    }
    if (!this.checking) void this.checkQueued();
  }

  private async checkQueued(): Promise<void> {
    this.checking = true;
    try {
      for (let g = this.gaps.shift(); g !== undefined; g = this.gaps.shift()) {
        if (!this.host.isCurrent(g.gen)) continue;
        let first: number | undefined;
        try {
          const query = { seq: g.after + 1, next_by_subj: this.subjects } as unknown as MsgRequest;
          first = (await this.jsm.streams.getMessage(this.stream, query))?.seq;
        } catch (err) {
          if (!this.host.isCurrent(g.gen)) continue;
          this.gaps = [];
          if (isPermissionDenied(err)) {
            // Restarting at every gap would not fix a permission; say what would, once.
            this.refused = true;
            this.logger.error(
              { err, stream: this.stream },
              `kv watch gap checks are off: this user may not read $JS.API.STREAM.MSG.GET.${this.stream} (grant it; docs/cluster.md)`,
            );
            return;
          }
          this.logger.warn({ err, stream: this.stream, after: g.after, next: g.next }, "could not check a gap in the kv watch; restarting it from a snapshot");
          this.host.checkFailed();
          return;
        }
        if (first !== undefined && first < g.next && this.host.isCurrent(g.gen)) {
          this.gaps = [];
          this.host.skipped(g.after + 1, `revision ${first} exists but the watch went from ${g.after} to ${g.next}`);
          return;
        }
      }
    } finally {
      this.checking = false;
    }
  }
}
