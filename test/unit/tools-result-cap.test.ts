import { describe, expect, it } from "vitest";
import { capText, serializeToolResult, truncateUtf8, utf8Boundary } from "../../src/tools/result-cap.js";

/** True when `s` has no lone surrogate (a split pair would leave one). */
function wellFormed(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const n = s.charCodeAt(i + 1);
      if (!(n >= 0xdc00 && n <= 0xdfff)) return false;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) return false;
  }
  return true;
}

// 1-, 2-, 3- and 4-byte UTF-8 characters (the 4-byte ones are surrogate pairs in UTF-16),
// and a flag made of two 4-byte code points.
const MIXED = "aé€😀ß中𝄞🇫🇷z".repeat(40);

describe("tool result cap", () => {
  it("result cap - at every byte limit the cut is a prefix of whole characters within the limit", () => {
    const total = Buffer.byteLength(MIXED);
    let cuts = 0;
    for (let limit = 0; limit <= total + 1; limit++) {
      const r = truncateUtf8(MIXED, limit);
      expect(Buffer.byteLength(r.text)).toBeLessThanOrEqual(limit);
      expect(MIXED.startsWith(r.text)).toBe(true);
      expect(wellFormed(r.text)).toBe(true);
      expect(r.text).not.toContain("\uFFFD");
      // Maximal: adding the next code point would pass the limit.
      if (r.truncated) {
        const next = String.fromCodePoint(MIXED.codePointAt(r.text.length)!);
        expect(Buffer.byteLength(r.text + next)).toBeGreaterThan(limit);
        cuts++;
      }
    }
    expect(cuts).toBe(total);
  });

  it("result cap - capText keeps text within the cap with a visible marker saying how much was cut", () => {
    const text = "😀".repeat(10_000); // 40,000 bytes
    for (const cap of [128, 129, 130, 131, 1000, 16 * 1024]) {
      const r = capText(text, cap);
      expect(r.truncated).toBe(true);
      expect(Buffer.byteLength(r.text)).toBeLessThanOrEqual(cap);
      expect(wellFormed(r.text)).toBe(true);
      const m = /\n\[… truncated by Kova: showing the first (\d+) of 40000 bytes\]$/.exec(r.text);
      expect(m).not.toBeNull();
      const head = r.text.slice(0, m!.index);
      expect(Number(m![1])).toBe(Buffer.byteLength(head));
      expect(head).toBe("😀".repeat(head.length / 2));
    }
    expect(capText("short", 128)).toEqual({ text: "short", truncated: false, totalBytes: 5 });
    expect(() => capText("x", 10)).toThrow(RangeError);
  });

  it("result cap - a byte stream cut mid-character is trimmed to its last whole character", () => {
    const buf = Buffer.from("ab€😀");
    for (let n = 0; n <= buf.length; n++) {
      const cut = buf.subarray(0, n);
      const end = utf8Boundary(cut, cut.length);
      expect(cut.subarray(0, end).toString()).not.toContain("\uFFFD");
      expect("ab€😀".startsWith(cut.subarray(0, end).toString())).toBe(true);
    }
    expect(utf8Boundary(buf, buf.length)).toBe(buf.length);
    expect(utf8Boundary(buf.subarray(0, 4), 4)).toBe(2);
  });

  it("result cap - results serialize as JSON with bigints and cycles made safe", () => {
    const cyclic: Record<string, unknown> = { n: 10n };
    cyclic.self = cyclic;
    expect(serializeToolResult(cyclic)).toBe('{"n":"10","self":"[Circular]"}');
    expect(serializeToolResult("as is")).toBe("as is");
    expect(serializeToolResult(undefined)).toBe("");
    expect(serializeToolResult({ a: [1, null] })).toBe('{"a":[1,null]}');
  });
});
