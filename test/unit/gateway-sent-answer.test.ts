import { describe, expect, it } from "vitest";
import { DIVERGED, SentAnswer } from "../../src/gateway/sent-answer.js";

const chunk = (text: string, append = true) => ({ text, append, lastChunk: false });
const last = (text: string) => ({ text, append: false, lastChunk: true });

describe("gateway: an OpenAI stream's sent answer", () => {
  it("sent answer - tokens go out as they come; the last chunk sends only the tail the tokens missed", () => {
    const s = new SentAnswer();
    expect(s.next(chunk("Hel", false))).toBe("Hel");
    expect(s.next(chunk("lo"))).toBe("lo");
    expect(s.next(last("Hello world"))).toBe(" world");
  });

  it("sent answer - a retried stream that repeats what was sent sends nothing until it passes it, then only the new text", () => {
    const s = new SentAnswer();
    expect(s.next(chunk("Hel", false))).toBe("Hel");
    // the projection's replacement after a restart: the answer is empty again
    expect(s.next(chunk("", false))).toBe("");
    expect(s.next(chunk("He", false))).toBe("");
    expect(s.next(chunk("llo"))).toBe("lo");
    expect(s.next(chunk(" there"))).toBe(" there");
    expect(s.next(last("Hello there"))).toBe("");
  });

  it("sent answer - a retry that says otherwise than what was sent diverges, mid-stream or when it ends shorter", () => {
    const other = new SentAnswer();
    other.next(chunk("Hello", false));
    other.next(chunk("", false));
    expect(other.next(chunk("Goodbye", false))).toBe(DIVERGED);
    const shorter = new SentAnswer();
    shorter.next(chunk("Hello wor", false));
    shorter.next(chunk("", false));
    expect(shorter.next(chunk("Hello", false))).toBe("");
    expect(shorter.next(last("Hello"))).toBe(DIVERGED);
  });

  it("sent answer - text streamed before a tool call, which the final output does not repeat, is kept without an error", () => {
    const s = new SentAnswer();
    expect(s.next(chunk("Let me check. ", false))).toBe("Let me check. ");
    expect(s.next(chunk("It is 5."))).toBe("It is 5.");
    expect(s.next(last("It is 5."))).toBe("");
  });
});
