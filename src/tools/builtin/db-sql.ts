/**
 * Just enough of PostgreSQL's lexer to see the statements in a string: comments (`--`,
 * nested `/* *\/`), string literals ('' escapes, E'' backslash escapes), quoted
 * identifiers and dollar quotes ($$…$$, $tag$…$tag$; `$1` is a parameter). A semicolon
 * outside them ends a statement. This is a first gate with a clear message; the server
 * is the real one (the extended protocol refuses a second statement, and DECLARE CURSOR
 * accepts only a SELECT or VALUES).
 */
export interface SqlShape {
  /** Non-empty statements. */
  statements: number;
  /** The first word of the first statement, lower-cased, after any opening parentheses. */
  firstKeyword: string | undefined;
  /** The first statement without the trailing semicolon(s). */
  body: string;
}

const IDENT_START = /[A-Za-z_\u0080-\uffff]/;
const IDENT_PART = /[A-Za-z0-9_$\u0080-\uffff]/;

export function inspectSql(sql: string): SqlShape {
  let statements = 0;
  let inStatement = false;
  let firstKeyword: string | undefined;
  let lookingForKeyword = true;
  let bodyEnd = 0;
  let i = 0;
  const n = sql.length;
  /** Records a token ending at `end`; `word` is its text when it is a bare word, "(" for a parenthesis. */
  const token = (end: number, word?: string) => {
    if (!inStatement) {
      inStatement = true;
      statements++;
    }
    if (statements !== 1) return;
    bodyEnd = end;
    if (lookingForKeyword && word !== "(") {
      firstKeyword = word?.toLowerCase();
      lookingForKeyword = false;
    }
  };
  while (i < n) {
    const c = sql[i]!;
    const next = sql[i + 1];
    if (/\s/.test(c)) {
      i++;
    } else if (c === "-" && next === "-") {
      const nl = sql.indexOf("\n", i);
      i = nl < 0 ? n : nl + 1;
    } else if (c === "/" && next === "*") {
      let depth = 1;
      i += 2;
      while (i < n && depth > 0) {
        const pair = sql.slice(i, i + 2);
        if (pair === "/*" || pair === "*/") {
          depth += pair === "/*" ? 1 : -1;
          i += 2;
        } else {
          i++;
        }
      }
    } else if (c === ";") {
      inStatement = false;
      i++;
    } else if (c === "'" || ((c === "e" || c === "E") && next === "'" && !identBefore(sql, i))) {
      const backslash = c !== "'";
      i = skipQuoted(sql, backslash ? i + 1 : i, "'", backslash);
      token(i);
    } else if (c === '"') {
      i = skipQuoted(sql, i, '"', false);
      token(i);
    } else if (c === "$" && !identBefore(sql, i)) {
      const tag = /^\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/.exec(sql.slice(i, i + 64));
      if (tag) {
        const close = sql.indexOf(tag[0], i + tag[0].length);
        i = close < 0 ? n : close + tag[0].length;
      } else {
        i++;
        while (i < n && /[0-9]/.test(sql[i]!)) i++;
      }
      token(i);
    } else if (IDENT_START.test(c)) {
      const start = i;
      while (i < n && IDENT_PART.test(sql[i]!)) i++;
      token(i, sql.slice(start, i));
    } else {
      i++;
      token(i, c === "(" ? "(" : undefined);
    }
  }
  return { statements, firstKeyword, body: sql.slice(0, bodyEnd) };
}

/** True when the character before `i` continues an identifier (so `a$b` or `name'` is not a quote start). */
function identBefore(sql: string, i: number): boolean {
  return i > 0 && IDENT_PART.test(sql[i - 1]!);
}

/** Index just past the closing quote (doubled quotes, and backslash escapes when asked, stay inside). */
function skipQuoted(sql: string, open: number, quote: string, backslash: boolean): number {
  let i = open + 1;
  while (i < sql.length) {
    const c = sql[i]!;
    if (backslash && c === "\\") i += 2;
    else if (c === quote && sql[i + 1] === quote) i += 2;
    else if (c === quote) return i + 1;
    else i++;
  }
  return sql.length;
}
