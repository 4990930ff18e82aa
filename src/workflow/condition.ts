import { TemplateError } from "./errors.js";
import { parsePath, stringify, type PathResolver, type Placeholder } from "./template.js";

/**
 * Conditions of `branch` (`if`) and `loop` (`while`, `until`): a small expression
 * language, parsed and evaluated here, never with `eval`.
 *
 *   {{steps.approve.output.approved}}
 *   steps.review.output.score >= 7 && input.mode != "draft"
 *   not (steps.check.output contains "error")
 *
 * Operands: paths (bare or in `{{ }}`), numbers, "strings" or 'strings', true, false,
 * null. Operators: == != < <= > >= contains, && (and), || (or), ! (not), parentheses.
 */
export type Condition =
  | { op: "lit"; value: unknown }
  | { op: "path"; ref: Placeholder }
  | { op: "not"; arg: Condition }
  | { op: "and" | "or"; left: Condition; right: Condition }
  | { op: "==" | "!=" | "<" | "<=" | ">" | ">=" | "contains"; left: Condition; right: Condition };

type Token = { t: "op"; v: string } | { t: "lit"; v: unknown } | { t: "path"; v: string };

const COMPARE = ["==", "!=", "<=", ">=", "<", ">", "contains"] as const;

function tokenize(text: string, step?: string): Token[] {
  const src = text.replace(/\{\{\s*([^{}]*?)\s*\}\}/g, " $1 ");
  const tokens: Token[] = [];
  let i = 0;
  const fail = (why: string): never => {
    throw new TemplateError(text, "", `${why} at character ${i + 1}`, step);
  };
  while (i < src.length) {
    const c = src[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const two = src.slice(i, i + 2);
    if (["==", "!=", "<=", ">=", "&&", "||"].includes(two)) {
      tokens.push({ t: "op", v: two === "&&" ? "and" : two === "||" ? "or" : two });
      i += 2;
    } else if ("<>!()".includes(c)) {
      tokens.push({ t: "op", v: c === "!" ? "not" : c });
      i++;
    } else if (c === '"' || c === "'") {
      const end = src.indexOf(c, i + 1);
      if (end < 0) fail("unterminated string");
      tokens.push({ t: "lit", v: src.slice(i + 1, end) });
      i = end + 1;
    } else {
      const m = /^[A-Za-z0-9_.-]+/.exec(src.slice(i));
      if (!m) fail(`unexpected ${JSON.stringify(c)}`);
      const word = m![0];
      i += word.length;
      if (/^-?\d+(\.\d+)?$/.test(word)) tokens.push({ t: "lit", v: Number(word) });
      else if (word === "true" || word === "false") tokens.push({ t: "lit", v: word === "true" });
      else if (word === "null") tokens.push({ t: "lit", v: null });
      else if (["and", "or", "not", "contains"].includes(word)) tokens.push({ t: "op", v: word });
      else tokens.push({ t: "path", v: word });
    }
  }
  return tokens;
}

/**
 * Parses a condition.
 * @throws TemplateError naming the condition (and a bad path in it)
 */
export function parseCondition(text: string, step?: string): Condition {
  const tokens = tokenize(text, step);
  let pos = 0;
  const peek = () => tokens[pos];
  const fail = (why: string): never => {
    throw new TemplateError(text, "", why, step);
  };
  const isOp = (v: string) => peek()?.t === "op" && peek()!.v === v;
  const primary = (): Condition => {
    const tok = tokens[pos++];
    if (!tok) return fail("the condition ends too early");
    if (tok.t === "lit") return { op: "lit", value: tok.v };
    if (tok.t === "path") return { op: "path", ref: parsePath(tok.v, text, step) };
    if (tok.v === "(") {
      const inner = or();
      if (!isOp(")")) fail("missing )");
      pos++;
      return inner;
    }
    return fail(`unexpected ${tok.v}`);
  };
  const compare = (): Condition => {
    const left = primary();
    const tok = peek();
    if (tok?.t === "op" && (COMPARE as readonly string[]).includes(tok.v)) {
      pos++;
      return { op: tok.v as (typeof COMPARE)[number], left, right: primary() };
    }
    return left;
  };
  const not = (): Condition => {
    if (isOp("not")) {
      pos++;
      return { op: "not", arg: not() };
    }
    return compare();
  };
  const and = (): Condition => {
    let left = not();
    while (isOp("and")) {
      pos++;
      left = { op: "and", left, right: not() };
    }
    return left;
  };
  const or = (): Condition => {
    let left = and();
    while (isOp("or")) {
      pos++;
      left = { op: "or", left, right: and() };
    }
    return left;
  };
  if (tokens.length === 0) fail("the condition is empty");
  const cond = or();
  if (pos < tokens.length) fail(`unexpected ${String(tokens[pos]!.v)} after the end of the condition`);
  return cond;
}

/** The paths a condition reads (for validation at load). */
export function conditionPaths(c: Condition): Placeholder[] {
  switch (c.op) {
    case "lit":
      return [];
    case "path":
      return [c.ref];
    case "not":
      return conditionPaths(c.arg);
    default:
      return [...conditionPaths(c.left), ...conditionPaths(c.right)];
  }
}

/**
 * Truthiness of a condition's value. Agents answer in text, so the strings "false", "no",
 * "0", "null" and "" are false, as are false, null, 0, and an empty array.
 */
export function truthy(v: unknown): boolean {
  if (v === null || v === undefined || v === false || v === 0) return false;
  if (typeof v === "string") return !["", "false", "no", "0", "null"].includes(v.trim().toLowerCase());
  if (Array.isArray(v)) return v.length > 0;
  return true;
}

function equal(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a === "object" || typeof b === "object") return JSON.stringify(a) === JSON.stringify(b);
  // "7" (an agent's text) equals 7; true equals "true"
  return stringify(a).trim() === stringify(b).trim();
}

function ordered(a: unknown, b: unknown): [number, number] | [string, string] {
  const na = Number(a);
  const nb = Number(b);
  if (a !== "" && b !== "" && a !== null && b !== null && Number.isFinite(na) && Number.isFinite(nb)) return [na, nb];
  return [stringify(a), stringify(b)];
}

/**
 * Evaluates a parsed condition.
 * @throws TemplateError naming the condition and the missing path
 */
export function evaluateCondition(c: Condition, text: string, resolver: PathResolver, step?: string): unknown {
  const ev = (x: Condition): unknown => evaluateCondition(x, text, resolver, step);
  switch (c.op) {
    case "lit":
      return c.value;
    case "path": {
      const r = resolver(c.ref.segments);
      if ("missing" in r) throw new TemplateError(text, c.ref.path, r.missing, step);
      return r.value;
    }
    case "not":
      return !truthy(ev(c.arg));
    case "and":
      return truthy(ev(c.left)) && truthy(ev(c.right));
    case "or":
      return truthy(ev(c.left)) || truthy(ev(c.right));
    case "==":
      return equal(ev(c.left), ev(c.right));
    case "!=":
      return !equal(ev(c.left), ev(c.right));
    case "contains": {
      const hay = ev(c.left);
      const needle = ev(c.right);
      if (Array.isArray(hay)) return hay.some((h) => equal(h, needle));
      return stringify(hay).includes(stringify(needle));
    }
    default: {
      const [a, b] = ordered(ev(c.left), ev(c.right));
      if (c.op === "<") return a < b;
      if (c.op === "<=") return a <= b;
      if (c.op === ">") return a > b;
      return a >= b;
    }
  }
}
