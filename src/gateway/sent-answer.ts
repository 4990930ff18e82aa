/**
 * What an OpenAI streaming client has been sent of a run's answer, kept against the answer
 * as the run's artifact updates (task-projection.ts) now have it.
 *
 * An SSE chat stream only appends: text sent cannot be taken back. When a model call's
 * stream is cut and retried, the projection replaces the answer with the text from before
 * that call (a non-append update), and the retry streams again from there. While the
 * retry repeats what the client already has, nothing is sent; once it goes past, only the
 * new tail is. If the retry says something else than what was sent, the client's text can
 * no longer become the answer: `next` says so (`DIVERGED`), and the stream ends with an
 * error instead of finishing with a garbled answer.
 */
export const DIVERGED = Symbol("diverged");

export class SentAnswer {
  /** What the client has. */
  private sent = "";
  /** The answer as the run's updates have it now. */
  private current = "";

  /**
   * Folds one artifact update of the answer.
   * @returns the text to send now (maybe empty), or DIVERGED when the client's text is no
   *   longer a prefix of the answer
   */
  next(update: { text: string; append: boolean; lastChunk: boolean }): string | typeof DIVERGED {
    if (update.lastChunk) {
      const output = update.text;
      // The whole answer: send what the tokens did not.
      if (output.startsWith(this.sent)) return this.take(output);
      // Text streamed before a tool call is not part of the final output: the client keeps
      // it, as a chat UI shows a model's words before its tool call. Not so text of an
      // attempt that was retried and not repeated.
      return this.current === this.sent ? "" : DIVERGED;
    }
    this.current = update.append ? this.current + update.text : update.text;
    if (this.current.startsWith(this.sent)) return this.take(this.current);
    // A retry still repeating what the client has.
    if (this.sent.startsWith(this.current)) return "";
    return DIVERGED;
  }

  private take(text: string): string {
    const tail = text.slice(this.sent.length);
    this.sent = text;
    return tail;
  }
}
