import { Writable } from "node:stream";

const LEVELS: Record<number, string> = { 10: "TRACE", 20: "DEBUG", 30: "INFO ", 40: "WARN ", 50: "ERROR", 60: "FATAL" };
const COLORS: Record<number, string> = { 10: "\x1b[90m", 20: "\x1b[36m", 30: "\x1b[32m", 40: "\x1b[33m", 50: "\x1b[31m", 60: "\x1b[35m" };
const OMIT = new Set(["level", "time", "pid", "hostname", "msg", "component", "part", "v"]);

/**
 * Turns one pino JSON line into a line a person reads in a terminal:
 * `12:03:04.512 WARN  [membership] peer silent node=n2 ageMs=5200`. Errors keep their
 * message, code and the first line of the stack; objects are shown as compact JSON.
 */
export function formatLogLine(json: string, color = false): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(json) as Record<string, unknown>;
  } catch {
    return json;
  }
  const level = typeof rec.level === "number" ? rec.level : 30;
  const time = typeof rec.time === "number" ? new Date(rec.time).toISOString().slice(11, 23) : "";
  const tag = LEVELS[level] ?? String(level);
  const head = color ? `${COLORS[level] ?? ""}${tag}\x1b[0m` : tag;
  // A part handed another component's logger (componentLogger) shows as `[coordinator/run-watcher]`.
  const part = typeof rec.part === "string" ? `/${rec.part}` : "";
  const component = typeof rec.component === "string" ? ` [${rec.component}${part}]` : "";
  const fields = Object.entries(rec)
    .filter(([k]) => !OMIT.has(k))
    .map(([k, v]) => `${k}=${describe(v)}`)
    .join(" ");
  return `${time} ${head}${component} ${String(rec.msg ?? "")}${fields ? ` ${fields}` : ""}`;
}

function describe(v: unknown): string {
  if (typeof v === "string") return /\s/.test(v) ? JSON.stringify(v) : v;
  if (v && typeof v === "object" && "message" in v && ("stack" in v || "type" in v)) {
    const e = v as { message?: unknown; code?: unknown; stack?: unknown };
    const where = typeof e.stack === "string" ? e.stack.split("\n")[1]?.trim() : undefined;
    return JSON.stringify(`${e.code ? `[${String(e.code)}] ` : ""}${String(e.message)}${where ? ` (${where})` : ""}`);
  }
  return JSON.stringify(v);
}

/** A destination for pino that writes readable lines (for a terminal) instead of JSON. */
export function lineStream(out: NodeJS.WritableStream, color: boolean): Writable {
  let pending = "";
  return new Writable({
    write(chunk: Buffer, _enc, done) {
      pending += chunk.toString("utf8");
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        out.write(`${formatLogLine(pending.slice(0, nl), color)}\n`);
        pending = pending.slice(nl + 1);
      }
      done();
    },
  });
}
