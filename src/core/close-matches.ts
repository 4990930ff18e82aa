/**
 * "Did you mean" hints for names a person typed (config keys, tool names): the candidates
 * closest to `name` by edit distance, ignoring case, best first. A candidate counts when
 * its distance is at most a third of the name's length (at least 2), or when it shares the
 * name's part before a `/` (the same MCP server).
 */
export function closeMatches(name: string, candidates: Iterable<string>, max = 3): string[] {
  const limit = Math.max(2, Math.floor(name.length / 3));
  const scored: Array<[number, string]> = [];
  const ns = name.includes("/") ? name.slice(0, name.indexOf("/") + 1) : undefined;
  for (const c of candidates) {
    const d = editDistance(name.toLowerCase(), c.toLowerCase());
    if (d <= limit || (ns !== undefined && c.startsWith(ns))) scored.push([d, c]);
  }
  scored.sort((a, b) => a[0] - b[0] || a[1].localeCompare(b[1]));
  return scored.slice(0, max).map(([, c]) => c);
}

/** Levenshtein distance. */
export function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}
