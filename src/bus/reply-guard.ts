import type { Logger } from "../core/index.js";
import { coreReplyProblem } from "./reply-subject.js";

/** How often a guard logs while it keeps dropping requests (the first is logged at once). */
export const REPLY_GUARD_LOG_INTERVAL_MS = 60_000;

/**
 * Decides, for each core NATS request a process answers, whether its reply subject may
 * be answered (coreReplyProblem). A refused request is dropped before its handler runs:
 * its requester could not be told the outcome, and a control request (spawn, signal)
 * that acts without answering would act behind its requester's back. Refusals are logged
 * the first time and then at most once per interval with the count since, so a flood of
 * forged requests cannot flood the log.
 */
export class ReplyGuard {
  private droppedTotal = 0;
  private droppedSinceLog = 0;
  private lastLogAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly inboxPrefixes: readonly string[],
    private readonly log: Logger,
    private readonly intervalMs = REPLY_GUARD_LOG_INTERVAL_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** Requests dropped so far for their reply subject. */
  get dropped(): number {
    return this.droppedTotal;
  }

  /**
   * @returns true when `reply` may be answered; false (dropped, counted, maybe logged)
   *   when it names anything but a reply inbox or a service import's reply
   */
  allows(reply: string, subject: string): boolean {
    const problem = coreReplyProblem(reply, this.inboxPrefixes);
    if (problem === undefined) return true;
    this.droppedTotal++;
    this.droppedSinceLog++;
    const at = this.now();
    if (at - this.lastLogAt >= this.intervalMs) {
      this.log.warn(
        { subject, reply: reply.slice(0, 120), dropped: this.droppedSinceLog, droppedTotal: this.droppedTotal },
        `request dropped unanswered: ${problem} (logged at most once per ${Math.round(this.intervalMs / 1000)} s; dropped counts the drops since the last line)`,
      );
      this.lastLogAt = at;
      this.droppedSinceLog = 0;
    }
    return false;
  }
}
