import { describe, expect, it } from "vitest";
import { inspectSql } from "../../src/tools/builtin/db-sql.js";

describe("db_query statement inspection", () => {
  it("db sql - sees one statement and its first keyword through comments and parentheses", () => {
    expect(inspectSql("select 1")).toEqual({ statements: 1, firstKeyword: "select", body: "select 1" });
    expect(inspectSql("  -- note\n /* a /* nested */ comment */ ((SELECT 1))  ;  ; -- done")).toEqual({
      statements: 1,
      firstKeyword: "select",
      body: "  -- note\n /* a /* nested */ comment */ ((SELECT 1))",
    });
    expect(inspectSql("WITH x AS (SELECT 1) SELECT * FROM x").firstKeyword).toBe("with");
    expect(inspectSql("/* SELECT */ DELETE FROM t").firstKeyword).toBe("delete");
  });

  it("db sql - finds a second statement after a semicolon but not inside literals, identifiers or comments", () => {
    const cases: Array<[string, number]> = [
      ["select 1; drop table t", 2],
      ["select ';' ; delete from t", 2],
      ["select 'a'';b'", 1],
      ["select E'\\';' ; delete from t", 2],
      ["select E'\\'' as x, ';'", 1],
      ['select 1 as "a;b"', 1],
      ['select 1 as "a"";b"; select 2', 2],
      ["select $$;$$", 1],
      ["select $tag$ ; $$ ; $tag$; drop table t", 2],
      ["select $1; drop table t", 2],
      ["select a$b; drop table t", 2],
      ["select 1 -- ; drop table t", 1],
      ["select 1 /* ; */ ; delete from t", 2],
      ["commit; drop table t", 2],
    ];
    expect(cases.map(([sql]) => [sql, inspectSql(sql).statements])).toEqual(cases);
    expect(inspectSql("commit; drop table t").firstKeyword).toBe("commit");
  });

  it("db sql - reports no statement for blank or comment-only text, and no keyword for a leading literal", () => {
    expect(inspectSql("  ;; -- nothing\n")).toEqual({ statements: 0, firstKeyword: undefined, body: "" });
    expect(inspectSql("'x'").firstKeyword).toBeUndefined();
  });
});
