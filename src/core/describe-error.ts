/**
 * A one-line description of anything thrown (by a tool, a hook), for error messages. Never throws:
 * a tool may throw a value whose `toString`, `message` getter or prototype traps throw
 * (`Object.assign(Object.create(null), { toString: undefined })` makes `String(err)`
 * throw), and the error path that describes it must not fail in turn.
 */
export function describeError(err: unknown): string {
  try {
    if (err instanceof Error) {
      const message = err.message;
      if (typeof message === "string") return message;
    }
  } catch {
    // A throwing `message` getter or `instanceof` trap: try the other ways.
  }
  try {
    const text = String(err);
    if (typeof text === "string") return text;
  } catch {
    // No usable toString: fall through.
  }
  try {
    const json = JSON.stringify(err);
    if (typeof json === "string") return json;
  } catch {
    // Cyclic, BigInt or a throwing toJSON: fall through.
  }
  return `an unprintable ${typeofSafe(err)} value`;
}

function typeofSafe(v: unknown): string {
  return v === null ? "null" : typeof v;
}
