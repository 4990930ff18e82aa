import { defineTool } from "../define-tool.js";
import { ExpressionSyntaxError, ExpressionUndefinedError } from "../errors.js";
import type { Tool } from "../types.js";

/**
 * `calculator`: arithmetic for models, which are unreliable at it. A small recursive-descent
 * parser (no eval, no Function: the expression is text from a model) over
 *
 * ```
 * expr    = term (("+" | "-") term)*
 * term    = unary (("*" | "/" | "%") unary)*
 * unary   = ("-" | "+") unary | power
 * power   = primary ("^" unary)?          right-associative; -2^2 = -4, 2^-1 = 0.5
 * primary = number | constant | name "(" expr ("," expr)* ")" | "(" expr ")"
 * ```
 *
 * with the functions in FUNCTIONS and the constants pi, e, tau. Results are rounded to 15
 * significant digits, so 0.1 + 0.2 is 0.3.
 */

/** Longest expression accepted, and deepest nesting: bounds on work and on the parser's recursion. */
const MAX_LENGTH = 1000;
const MAX_DEPTH = 64;

const CONSTANTS: Record<string, number> = { pi: Math.PI, e: Math.E, tau: 2 * Math.PI };

type Fn = { arity: [number, number]; apply: (args: number[]) => number };
const unary = (f: (x: number) => number): Fn => ({ arity: [1, 1], apply: (a) => f(a[0]!) });
const FUNCTIONS: Record<string, Fn> = {
  sqrt: unary((x) => (x < 0 ? undef("sqrt of a negative number") : Math.sqrt(x))),
  cbrt: unary(Math.cbrt),
  abs: unary(Math.abs),
  floor: unary(Math.floor),
  ceil: unary(Math.ceil),
  trunc: unary(Math.trunc),
  round: {
    arity: [1, 2],
    apply: ([x, digits = 0]) => {
      if (!Number.isInteger(digits) || digits < 0 || digits > 15) return undef("round(x, digits) needs digits from 0 to 15");
      const f = 10 ** digits;
      return Math.round(x! * f) / f;
    },
  },
  min: { arity: [1, 100], apply: (a) => Math.min(...a) },
  max: { arity: [1, 100], apply: (a) => Math.max(...a) },
  pow: { arity: [2, 2], apply: ([x, y]) => power(x!, y!) },
  exp: unary(Math.exp),
  ln: unary((x) => log(x, Math.log)),
  log: {
    arity: [1, 2],
    apply: ([x, base]) =>
      base === undefined ? log(x!, Math.log) : base <= 0 || base === 1 ? undef("log base must be positive and not 1") : log(x!, Math.log) / Math.log(base),
  },
  log10: unary((x) => log(x, Math.log10)),
  log2: unary((x) => log(x, Math.log2)),
  sin: unary(Math.sin),
  cos: unary(Math.cos),
  tan: unary(Math.tan),
  asin: unary((x) => (Math.abs(x) > 1 ? undef("asin needs a value from -1 to 1") : Math.asin(x))),
  acos: unary((x) => (Math.abs(x) > 1 ? undef("acos needs a value from -1 to 1") : Math.acos(x))),
  atan: unary(Math.atan),
};

function undef(message: string): never {
  throw new ExpressionUndefinedError(message);
}

function log(x: number, f: (x: number) => number): number {
  return x <= 0 ? undef("logarithm of a number that is not positive") : f(x);
}

function power(x: number, y: number): number {
  if (x === 0 && y < 0) return undef("zero to a negative power (division by zero)");
  if (x < 0 && !Number.isInteger(y)) return undef("a negative number to a fractional power");
  return x ** y;
}

type Token =
  | { kind: "num"; value: number; pos: number }
  | { kind: "name"; value: string; pos: number }
  | { kind: "op"; value: string; pos: number }
  | { kind: "end"; pos: number };

function tokenize(src: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (/\s/.test(c)) {
      i++;
    } else if (/[0-9.]/.test(c)) {
      const m = /^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?/.exec(src.slice(i));
      if (!m) throw new ExpressionSyntaxError(`malformed number`, i);
      tokens.push({ kind: "num", value: Number(m[0]), pos: i });
      i += m[0].length;
      if (/[0-9.]/.test(src[i] ?? "")) throw new ExpressionSyntaxError(`malformed number "${src.slice(i - m[0].length, i + 1)}"`, i);
    } else if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(src.slice(i))!;
      tokens.push({ kind: "name", value: m[0].toLowerCase(), pos: i });
      i += m[0].length;
    } else if ("+-*/%^(),".includes(c)) {
      tokens.push({ kind: "op", value: c, pos: i });
      i++;
    } else {
      throw new ExpressionSyntaxError(`unexpected character ${JSON.stringify(c)} (use + - * / % ^, parentheses, numbers and functions such as sqrt)`, i);
    }
  }
  tokens.push({ kind: "end", pos: src.length });
  return tokens;
}

class Parser {
  #i = 0;
  #depth = 0;
  constructor(readonly tokens: Token[]) {}

  parse(): number {
    const v = this.#expr();
    const t = this.#peek();
    if (t.kind !== "end") {
      const hint =
        t.kind === "op" && t.value === ")" ? " (no matching opening parenthesis)" : t.kind !== "op" || t.value === "(" ? " (write * to multiply)" : "";
      throw new ExpressionSyntaxError(`unexpected ${describe(t)}${hint}`, t.pos);
    }
    return v;
  }

  #peek(): Token {
    return this.tokens[this.#i]!;
  }

  #isOp(...ops: string[]): boolean {
    const t = this.#peek();
    return t.kind === "op" && ops.includes(t.value);
  }

  #next(): Token {
    return this.tokens[this.#i++]!;
  }

  #nested<T>(pos: number, f: () => T): T {
    if (++this.#depth > MAX_DEPTH) throw new ExpressionSyntaxError(`nested more than ${MAX_DEPTH} levels deep`, pos);
    try {
      return f();
    } finally {
      this.#depth--;
    }
  }

  #expr(): number {
    let v = this.#term();
    while (this.#isOp("+", "-")) {
      const op = this.#next();
      const r = this.#term();
      v = op.kind === "op" && op.value === "+" ? v + r : v - r;
    }
    return v;
  }

  #term(): number {
    let v = this.#unary();
    while (this.#isOp("*", "/", "%")) {
      const op = this.#next() as Token & { value: string };
      const r = this.#unary();
      if ((op.value === "/" || op.value === "%") && r === 0) throw new ExpressionUndefinedError(op.value === "/" ? "division by zero" : "modulo by zero");
      v = op.value === "*" ? v * r : op.value === "/" ? v / r : v % r;
    }
    return v;
  }

  #unary(): number {
    if (this.#isOp("-", "+")) {
      const op = this.#next() as Token & { value: string };
      const v = this.#nested(op.pos, () => this.#unary());
      return op.value === "-" ? -v : v;
    }
    return this.#power();
  }

  #power(): number {
    const base = this.#primary();
    if (!this.#isOp("^")) return base;
    const op = this.#next();
    return power(
      base,
      this.#nested(op.pos, () => this.#unary()),
    );
  }

  #primary(): number {
    const t = this.#next();
    if (t.kind === "num") return t.value;
    if (t.kind === "op" && t.value === "(") {
      const v = this.#nested(t.pos, () => this.#expr());
      this.#expect(")", t.pos);
      return v;
    }
    if (t.kind === "name") {
      if (this.#isOp("(")) return this.#call(t.value, t.pos);
      if (t.value in CONSTANTS) return CONSTANTS[t.value]!;
      if (t.value in FUNCTIONS) throw new ExpressionSyntaxError(`function ${t.value} needs parentheses: ${t.value}(x)`, t.pos);
      throw new ExpressionSyntaxError(`unknown name "${t.value}" (constants: ${Object.keys(CONSTANTS).join(", ")})`, t.pos);
    }
    throw new ExpressionSyntaxError(t.kind === "end" ? "the expression ends too early" : `unexpected ${describe(t)}`, t.pos);
  }

  #call(name: string, pos: number): number {
    const fn = FUNCTIONS[name];
    if (!fn) throw new ExpressionSyntaxError(`unknown function "${name}" (known: ${Object.keys(FUNCTIONS).join(", ")})`, pos);
    const open = this.#next();
    const args: number[] = [];
    if (!this.#isOp(")")) {
      for (;;) {
        args.push(this.#nested(open.pos, () => this.#expr()));
        if (!this.#isOp(",")) break;
        this.#next();
      }
    }
    this.#expect(")", open.pos);
    const [lo, hi] = fn.arity;
    if (args.length < lo || args.length > hi) {
      throw new ExpressionSyntaxError(`${name} takes ${lo === hi ? lo : `${lo} to ${hi}`} argument(s), not ${args.length}`, pos);
    }
    return fn.apply(args);
  }

  #expect(op: string, openedAt: number): void {
    const t = this.#peek();
    if (t.kind === "op" && t.value === op) {
      this.#i++;
      return;
    }
    throw new ExpressionSyntaxError(`expected "${op}" to close the parenthesis at position ${openedAt}, found ${describe(t)}`, t.pos);
  }
}

function describe(t: Token): string {
  return t.kind === "end" ? "the end of the expression" : t.kind === "num" ? `number ${t.value}` : `"${t.value}"`;
}

/**
 * Evaluates an arithmetic expression.
 * @throws ExpressionSyntaxError (with the 0-based position) when it does not parse;
 *   ExpressionUndefinedError when it has no finite value
 */
export function evaluate(expression: string): number {
  if (expression.length > MAX_LENGTH) throw new ExpressionSyntaxError(`the expression is longer than ${MAX_LENGTH} characters`, MAX_LENGTH);
  const value = new Parser(tokenize(expression)).parse();
  if (!Number.isFinite(value)) throw new ExpressionUndefinedError("the result is too large to represent (overflow)");
  // 15 significant digits: what a double holds exactly, so 0.1 + 0.2 reads 0.3.
  const rounded = Number(value.toPrecision(15));
  return Object.is(rounded, -0) ? 0 : rounded;
}

/** Builds `calculator`. */
export function createCalculatorTools(): Tool[] {
  return [
    defineTool<{ expression: string }, { expression: string; result: number }>({
      name: "calculator",
      description:
        "Evaluates an arithmetic expression exactly as written: + - * / % ^, parentheses, unary minus, constants pi, e, tau, " +
        `and functions ${Object.keys(FUNCTIONS).join(", ")}. Example: "(3 + 4) * 2 ^ 3 / sqrt(16)".`,
      idempotent: true,
      parameters: {
        type: "object",
        properties: { expression: { type: "string", minLength: 1, maxLength: MAX_LENGTH } },
        required: ["expression"],
        additionalProperties: false,
      },
      run: ({ expression }) => ({ expression, result: evaluate(expression) }),
    }),
  ];
}
