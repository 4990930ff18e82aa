import { randomBytes } from "node:crypto";
import { chmod, stat } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isKovaError } from "../../src/core/errors.js";
import { createLogger } from "../../src/core/logger.js";
import { createDbTool, dbConfigFrom, type DbTool } from "../../src/tools/builtin/db.js";
import { DbErrorCode } from "../../src/tools/builtin/db-errors.js";
import { poll } from "../fixtures/poll.js";
import { loadCorpus } from "../fixtures/security/corpus.js";
import { tempDir } from "../fixtures/disposable.js";
import { toolContext } from "../fixtures/tool-call.js";

const silent = createLogger({ level: "silent" });
const ADMIN_URL = "postgres://postgres@127.0.0.1:5432/test";

/** The functions whose EXECUTE right db_query's start-up check requires the query's identities not to hold. */
const SIGNAL_FUNCTIONS = "pg_catalog.pg_terminate_backend(integer, bigint), pg_catalog.pg_cancel_backend(integer)";
const SET_CONFIG = "pg_catalog.set_config(text, text, boolean)";

/**
 * A database of its own (function privileges are per database, so revoking them here
 * touches nobody else's tests) with a table, a sequence and SECURITY DEFINER writers, plus
 * two roles: a login that holds write grants on all of it, and a NOLOGIN reader with SELECT
 * only that the login may SET ROLE to. The database is set up the way docs/tools-shell-db.md
 * asks: the signal functions and set_config revoked from PUBLIC, set_config granted back to
 * the login alone (so without a role a query may still call it, and the read-only
 * transaction must hold; with the role it may not, so the role holds). Everything is
 * dropped on dispose.
 */
async function pgFixture() {
  const sfx = randomBytes(4).toString("hex");
  const names = { database: `kova_t_${sfx}`, schema: `kova_t_${sfx}`, table: "items", seq: "items_seq", writer: `kova_rw_${sfx}`, reader: `kova_ro_${sfx}` };
  const { database, schema, table, seq, writer, reader } = names;
  const server = new pg.Client({ connectionString: ADMIN_URL });
  await server.connect();
  // template0 accepts no connections, so the copy never waits for another test's session on template1.
  await server.query(`CREATE DATABASE ${database} TEMPLATE template0`);
  await server.query(`CREATE ROLE ${writer} LOGIN; CREATE ROLE ${reader} NOLOGIN; GRANT ${reader} TO ${writer}`);
  const admin = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:5432/${database}` });
  await admin.connect();
  await admin.query(`
    REVOKE EXECUTE ON FUNCTION ${SIGNAL_FUNCTIONS}, ${SET_CONFIG} FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION ${SET_CONFIG} TO ${writer};
    CREATE SCHEMA ${schema};
    CREATE TABLE ${schema}.${table} (id int PRIMARY KEY, name text NOT NULL, born timestamp, big bigint, price numeric, doc jsonb, ok boolean);
    INSERT INTO ${schema}.${table} VALUES
      (1, 'one', '2024-01-02 03:04:05', 9007199254740993, 1.10, '{"a": 1}', true),
      (2, 'two', NULL, NULL, NULL, NULL, false),
      (3, 'three', NULL, NULL, NULL, NULL, NULL);
    CREATE SEQUENCE ${schema}.${seq};
    CREATE FUNCTION ${schema}.kova_writer() RETURNS int LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN DELETE FROM ${schema}.${table}; RETURN 1; END $$;
    CREATE PROCEDURE ${schema}.kova_writer_proc() LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN DELETE FROM ${schema}.${table}; END $$;
    GRANT USAGE, CREATE ON SCHEMA ${schema} TO ${writer};
    GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON ${schema}.${table} TO ${writer};
    GRANT USAGE, SELECT, UPDATE ON SEQUENCE ${schema}.${seq} TO ${writer};
    GRANT EXECUTE ON FUNCTION ${schema}.kova_writer() TO ${writer};
    GRANT EXECUTE ON PROCEDURE ${schema}.kova_writer_proc() TO ${writer};
    GRANT USAGE ON SCHEMA ${schema} TO ${reader};
    GRANT SELECT ON ${schema}.${table} TO ${reader};`);
  const dblink = (await admin.query("SELECT 1 FROM pg_available_extensions WHERE name = 'dblink'")).rowCount === 1;
  if (dblink) await admin.query(`CREATE EXTENSION dblink SCHEMA ${schema}; GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${schema} TO ${writer}`);
  return {
    ...names,
    admin,
    dblink,
    writerUrl: `postgres://${writer}@127.0.0.1:5432/${database}`,
    /** The login in the shared database, where every function keeps PostgreSQL's default grants. */
    writerDefaultsUrl: `postgres://${writer}@127.0.0.1:5432/test`,
    async [Symbol.asyncDispose]() {
      await admin.end();
      try {
        await server.query(`DROP DATABASE ${database} WITH (FORCE)`);
        await server.query(`DROP ROLE ${writer}; DROP ROLE ${reader}`);
      } finally {
        await server.end();
      }
    },
  };
}
type PgFixture = Awaited<ReturnType<typeof pgFixture>>;

/** A session that sleeps until disposed: a canary that no corpus entry may cancel or end. */
async function sleepingSession(url: string): Promise<{ pid: number; settled(): boolean } & AsyncDisposable> {
  const client = new pg.Client({ connectionString: url });
  // Terminated on purpose at dispose: the query fails with 57P01 and, depending on which
  // arrives first, the client may also emit "Connection terminated unexpectedly", which
  // without a listener is an uncaught exception (it failed a CI run once on Node 24).
  client.on("error", () => undefined);
  await client.connect();
  const pid = (await client.query("SELECT pg_backend_pid() AS pid")).rows[0].pid as number;
  let settled = false;
  const settle = () => {
    settled = true;
  };
  const sleeping = client.query("SELECT pg_sleep(3600)").then(settle, settle);
  return {
    pid,
    settled: () => settled,
    async [Symbol.asyncDispose]() {
      const admin = new pg.Client({ connectionString: ADMIN_URL });
      await admin.connect();
      try {
        await admin.query("SELECT pg_terminate_backend($1)", [pid]);
      } finally {
        await admin.end();
      }
      await sleeping;
      await client.end().catch(() => {});
    },
  };
}

function dbTool(url: string, table: Record<string, unknown> = {}): DbTool {
  return createDbTool(dbConfigFrom({ url_env: "KOVA_TEST_DB_URL", ...table }, "tools.db", { KOVA_TEST_DB_URL: url }), silent);
}

/** Everything a write could change, read through the superuser connection. */
async function snapshot(f: PgFixture): Promise<string> {
  const { schema, table, seq } = f;
  try {
    const r = await f.admin.query(
      `SELECT
         (SELECT md5(coalesce(string_agg(id || ':' || name, ',' ORDER BY id), '')) FROM ${schema}.${table}) AS rows,
         (SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2) AS cols,
         (SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE nspname = $1) AS rels,
         (SELECT relacl::text FROM pg_class WHERE oid = '${schema}.${table}'::regclass) AS acl,
         (SELECT last_value || '/' || is_called FROM ${schema}.${seq}) AS seq,
         (SELECT count(*) FROM pg_largeobject_metadata) AS large_objects`,
      [schema, table],
    );
    return JSON.stringify(r.rows[0]);
  } catch (err) {
    return `snapshot failed: ${(err as Error).message}`;
  }
}

describe("db_query write corpus", () => {
  it("db_query - every write in the corpus is refused or contained, checked by its effect", { timeout: 120_000 }, async () => {
    await using f = await pgFixture();
    await using files = await tempDir("kova-db-canary-");
    // World-writable, so only PostgreSQL's own refusal can keep the server from writing here.
    await chmod(files.path, 0o777);
    const canaryFile = join(files.path, "pwned");
    // Two sessions that sleep the whole time: one of the superuser, and one of the tool's own
    // login, which the login could end if it kept PostgreSQL's default grant on
    // pg_terminate_backend (the same as ending another agent's db_query call).
    await using canary = await sleepingSession(ADMIN_URL);
    await using loginCanary = await sleepingSession(f.writerUrl);
    const corpus = loadCorpus("sql-writes.txt");
    const fill = (sql: string) =>
      sql
        .replaceAll("{schema}", f.schema)
        .replaceAll("{table}", f.table)
        .replaceAll("{seq}", f.seq)
        .replaceAll("{canary_pid}", String(canary.pid))
        .replaceAll("{login_canary_pid}", String(loginCanary.pid))
        .replaceAll("{canary_file}", canaryFile)
        .replaceAll("{writer_fn}", "kova_writer")
        .replaceAll("{writer_proc}", "kova_writer_proc");
    const before = await snapshot(f);
    const violations: string[] = [];
    const report: string[] = [];
    // Pass A leans on the read-only transaction and the one-query rule alone (the login may
    // write); pass B adds a role without write grants.
    for (const pass of [
      { label: "login with write grants", role: undefined, expectUser: f.writer },
      { label: `and role ${f.reader}`, role: f.reader, expectUser: f.reader },
    ]) {
      // One connection, so whatever an entry leaves in the session meets the next call.
      await using tool = dbTool(f.writerUrl, { pool_size: 1, statement_timeout_ms: 3000, ...(pass.role ? { role: pass.role } : {}) });
      report.push(`-- pass: ${pass.label}`);
      for (const entry of corpus) {
        const sql = fill(entry.text);
        const fail = (what: string) => violations.push(`${pass.label} / ${entry.name}: ${what}`);
        let outcome: string;
        let output = "";
        try {
          const r = await tool.run({ sql }, toolContext());
          output = JSON.stringify(r.rows);
          outcome = `ran: ${r.rowCount} row(s) ${output.slice(0, 60)}`;
        } catch (err) {
          outcome = `refused: ${isKovaError(err) ? `${err.code}${(err.data as { sqlstate?: string })?.sqlstate ? ` ${(err.data as { sqlstate: string }).sqlstate}` : ""}` : "error"} ${(err as Error).message.slice(0, 100)}`;
        }
        const after = await snapshot(f);
        if (after !== before) fail(`the database changed: ${after}`);
        if (
          await stat(canaryFile).then(
            () => true,
            () => false,
          )
        )
          fail("the server wrote the canary file");
        for (const [what, session] of [
          ["the superuser's canary session", canary],
          ["the login's canary session", loginCanary],
        ] as const) {
          if (session.settled()) fail(`${what}: its query was cancelled or its session ended`);
          const alive = await f.admin.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1", [session.pid]);
          if (alive.rowCount !== 1) fail(`${what}: the backend is gone`);
        }
        if (pass.role && output.includes(JSON.stringify(f.writer))) fail(`a query acted as the login ${f.writer}, not as the role`);
        const lock = await f.admin.query("SELECT pg_try_advisory_lock(4242) AS got");
        if (lock.rows[0].got) await f.admin.query("SELECT pg_advisory_unlock(4242)");
        else fail("an advisory lock outlived the call");
        if (output.includes("root:")) fail("a server file was read");
        const next = await tool.run({ sql: "SELECT current_user::text, current_setting('transaction_read_only')" }, toolContext());
        if (next.rows[0]![0] !== pass.expectUser || next.rows[0]![1] !== "on") fail(`the next call ran as ${JSON.stringify(next.rows[0])}`);
        report.push(`${violations.some((v) => v.startsWith(`${pass.label} / ${entry.name}:`)) ? "FAIL" : "ok  "} ${entry.name.padEnd(36)} ${outcome}`);
      }
    }
    console.log(`db_query corpus: ${corpus.length} entries x 2 passes${f.dblink ? "" : " (dblink not installed here)"}\n${report.join("\n")}`);
    expect(corpus.length).toBeGreaterThanOrEqual(20);
    expect(violations).toEqual([]);
  });
});

describe("db_query", () => {
  let f: PgFixture;
  let tool: DbTool;
  beforeAll(async () => {
    f = await pgFixture();
    tool = dbTool(f.writerUrl, { max_rows: 2, statement_timeout_ms: 400 });
  });
  afterAll(async () => {
    await tool?.close();
    await f?.[Symbol.asyncDispose]();
  });

  it("db_query - runs a parameterised query and returns typed columns and rows", async () => {
    const r = await tool.run({ sql: `SELECT id, name, born, big, price, doc, ok FROM ${f.schema}.items WHERE id = $1`, params: [1] }, toolContext());
    expect(r.columns).toEqual([
      { name: "id", type: "int4" },
      { name: "name", type: "text" },
      { name: "born", type: "timestamp" },
      { name: "big", type: "int8" },
      { name: "price", type: "numeric" },
      { name: "doc", type: "jsonb" },
      { name: "ok", type: "bool" },
    ]);
    expect(r.rows).toEqual([[1, "one", "2024-01-02 03:04:05", "9007199254740993", "1.10", { a: 1 }, true]]);
    expect(r).toMatchObject({ rowCount: 1, truncated: false });
    expect(tool.idempotent).toBe(true);
  });

  it("db_query - caps rows at max_rows and reports truncated", async () => {
    const over = await tool.run({ sql: "SELECT g FROM generate_series(1, 10000) g" }, toolContext());
    expect(over).toMatchObject({ rows: [[1], [2]], rowCount: 2, truncated: true });
    const exact = await tool.run({ sql: "VALUES (1), (2)" }, toolContext());
    expect(exact).toMatchObject({ rowCount: 2, truncated: false });
  });

  it("db_query - binds parameters as values, never as SQL", async () => {
    const evil = `x'); DELETE FROM ${f.schema}.items; --`;
    const r = await tool.run({ sql: "SELECT $1::text AS v, $2::int[] AS ids", params: [evil, [1, 2]] }, toolContext());
    expect(r.rows).toEqual([[evil, "{1,2}"]]);
    expect((await f.admin.query(`SELECT count(*)::int AS n FROM ${f.schema}.items`)).rows[0].n).toBe(3);
  });

  it("db_query - a query past statement_timeout_ms fails with DB_STATEMENT_TIMEOUT and the next call works", async () => {
    const t0 = performance.now();
    await expect(tool.run({ sql: "SELECT pg_sleep(30)" }, toolContext())).rejects.toMatchObject({ code: DbErrorCode.DB_STATEMENT_TIMEOUT });
    expect(performance.now() - t0).toBeLessThan(3000);
    expect((await tool.run({ sql: "SELECT 1" }, toolContext())).rows).toEqual([[1]]);
  });

  it("db_query - a call whose backend the server ends mid-query fails with an error (never an uncaught exception) and the next call works", async () => {
    await using slow = dbTool(f.writerUrl, { pool_size: 1, statement_timeout_ms: 20_000 });
    // Several rounds: whether pg reports the end as the query's error or also as a
    // connection 'error' event depends on which arrives first.
    for (let round = 0; round < 5; round++) {
      const call = slow.run({ sql: `SELECT pg_sleep(30), ${round} AS round` }, toolContext());
      const failed = call.then(
        () => undefined,
        (e: unknown) => e,
      );
      const pid = await poll(
        // The query runs as a cursor: its backend shows the FETCH while it sleeps.
        async () =>
          (await f.admin.query("SELECT pid FROM pg_stat_activity WHERE usename = $1 AND state = 'active' AND query LIKE 'FETCH%'", [f.writer])).rows[0]?.pid as
            | number
            | undefined,
        { timeoutMs: 5_000, what: "the call's backend" },
      );
      await f.admin.query("SELECT pg_terminate_backend($1)", [pid]);
      const err = await failed;
      expect(isKovaError(err), String(err)).toBe(true);
      expect((await slow.run({ sql: "SELECT 1" }, toolContext())).rows).toEqual([[1]]);
    }
  });

  it("db_query - returns PostgreSQL errors with SQLSTATE, message and the position in the model's text", async () => {
    const err = await tool.run({ sql: "SELECT nope FROM generate_series(1, 2) g" }, toolContext()).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: DbErrorCode.DB_QUERY_FAILED,
      retryable: false,
      data: { sqlstate: "42703", message: 'column "nope" does not exist', position: 8 },
    });
    expect((err as Error).message).toContain("42703");
  });

  it("db_query - refuses several statements and non-queries before connecting", async () => {
    // Nothing listens on this URL: a refusal that needed the server would fail differently.
    const offline = dbTool("postgres://nobody@127.0.0.1:1/none");
    try {
      await expect(offline.run({ sql: "SELECT 1; SELECT 2" }, toolContext())).rejects.toMatchObject({ code: DbErrorCode.DB_MULTIPLE_STATEMENTS });
      await expect(offline.run({ sql: "-- hi\nUPDATE t SET x = 1" }, toolContext())).rejects.toMatchObject({
        code: DbErrorCode.DB_NOT_A_QUERY,
        data: { keyword: "update" },
      });
      await expect(offline.run({ sql: "  ; " }, toolContext())).rejects.toMatchObject({ code: DbErrorCode.DB_NOT_A_QUERY });
      await expect(offline.run({ sql: "SELECT 1" }, toolContext())).rejects.toMatchObject({ code: DbErrorCode.DB_UNAVAILABLE, retryable: true });
    } finally {
      await offline.close();
    }
  });

  it("db_query - reports a server that drops connections as DB_UNAVAILABLE, retryable", async () => {
    const server = createServer((s) => s.destroy());
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as { port: number }).port;
    const t = dbTool(`postgres://nobody@127.0.0.1:${port}/none`);
    try {
      await expect(t.run({ sql: "SELECT 1" }, toolContext())).rejects.toMatchObject({ code: DbErrorCode.DB_UNAVAILABLE, retryable: true });
    } finally {
      await t.close();
      await new Promise((r) => server.close(r));
    }
  });

  it("db_query - hands its connection to the next call clean: same backend, no advisory lock, no setting kept", async () => {
    await using t = dbTool(f.writerUrl, { pool_size: 1 });
    const pid = (await t.run({ sql: "SELECT pg_backend_pid()" }, toolContext())).rows[0]![0];
    await t.run({ sql: "SELECT pg_advisory_lock(4343), set_config('search_path', 'pg_catalog', false)" }, toolContext());
    const next = await t.run({ sql: "SELECT pg_backend_pid(), current_setting('search_path')" }, toolContext());
    expect(next.rows[0]).toEqual([pid, '"$user", public']);
    expect((await f.admin.query("SELECT pg_try_advisory_lock(4343) AS got")).rows[0].got).toBe(true);
    await f.admin.query("SELECT pg_advisory_unlock(4343)");
  });

  it("db_query - runs every query as the configured role", async () => {
    await using t = dbTool(f.writerUrl, { role: f.reader });
    expect((await t.run({ sql: "SELECT current_user::text, session_user::text" }, toolContext())).rows).toEqual([[f.reader, f.writer]]);
    // The login may use the sequence; the role may not, so the refusal is the role's doing.
    await expect(t.run({ sql: `SELECT last_value FROM ${f.schema}.items_seq` }, toolContext())).rejects.toMatchObject({ data: { sqlstate: "42501" } });
  });

  it("db_query - refuses a superuser login unless allow_privileged_login is set, because a query can undo the role", async () => {
    await using strict = dbTool(ADMIN_URL, { role: f.reader });
    const err = await strict.run({ sql: "SELECT 1" }, toolContext()).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: DbErrorCode.DB_PRIVILEGED_LOGIN, data: { login: "postgres", powers: expect.arrayContaining(["superuser"]) } });
    expect((err as Error).message).toContain("allow_privileged_login");
    await using lax = dbTool(ADMIN_URL, { role: f.reader, allow_privileged_login: true });
    expect((await lax.run({ sql: "SELECT current_user::text" }, toolContext())).rows).toEqual([[f.reader]]);
    // Why the guard exists: inside one SELECT the role is gone again.
    const undone = await lax.run({ sql: "SELECT set_config('role', 'none', true), current_user::text" }, toolContext());
    expect(undone.rows[0]![1]).toBe("postgres");
  });

  it("db_query - refuses a login that may end its own other sessions, naming the REVOKE, because a query could end another agent's call", async () => {
    // The shared database keeps PostgreSQL's defaults: EXECUTE on the signal functions for PUBLIC.
    await using strict = dbTool(f.writerDefaultsUrl);
    const err = await strict.run({ sql: "SELECT 1" }, toolContext()).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: DbErrorCode.DB_LOGIN_NOT_CONFINED,
      data: {
        login: f.writer,
        database: "test",
        // The login may run set_config here, so the reader it may SET ROLE to counts as well.
        findings: [
          { kind: "session_signals", function: "pg_catalog.pg_cancel_backend(integer)", holders: [f.reader, f.writer].sort(), grantees: ["PUBLIC"] },
          { kind: "session_signals", function: "pg_catalog.pg_terminate_backend(integer,bigint)", holders: [f.reader, f.writer].sort(), grantees: ["PUBLIC"] },
        ],
      },
    });
    const message = (err as Error).message;
    expect(message).toContain("in database test: REVOKE EXECUTE ON FUNCTION pg_catalog.pg_cancel_backend(integer) FROM PUBLIC;");
    expect(message).toContain("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_terminate_backend(integer,bigint) FROM PUBLIC;");
    expect(message).toContain("allow_session_signals = true");
    // The refusal holds for later calls too; nothing was run.
    await expect(strict.run({ sql: "SELECT 1" }, toolContext())).rejects.toMatchObject({ code: DbErrorCode.DB_LOGIN_NOT_CONFINED });

    // Why the check exists: with the opt-out, one SELECT ends a session of the same login.
    await using other = await sleepingSession(f.writerUrl);
    await using lax = dbTool(f.writerDefaultsUrl, { allow_session_signals: true });
    expect((await lax.run({ sql: "SELECT pg_terminate_backend($1)", params: [other.pid] }, toolContext())).rows).toEqual([[true]]);
    await poll(() => other.settled() || undefined, { timeoutMs: 5000, what: "the other session to end" });
  });

  it("db_query - refuses a role that set_config can undo, naming the REVOKE; in a database that revoked it the role holds", async () => {
    await using strict = dbTool(f.writerDefaultsUrl, { role: f.reader, allow_session_signals: true });
    const err = await strict.run({ sql: "SELECT 1" }, toolContext()).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: DbErrorCode.DB_LOGIN_NOT_CONFINED,
      data: {
        role: f.reader,
        findings: [{ kind: "role_reset", function: "pg_catalog.set_config(text,text,boolean)", holders: [f.reader], grantees: ["PUBLIC"] }],
      },
    });
    expect((err as Error).message).toContain("REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text,text,boolean) FROM PUBLIC;");
    expect((err as Error).message).toContain("allow_role_reset = true");
    // Why: where the role may run set_config, one SELECT drops it and acts as the login.
    await using lax = dbTool(f.writerDefaultsUrl, { role: f.reader, allow_session_signals: true, allow_role_reset: true });
    expect((await lax.run({ sql: "SELECT set_config('role', 'none', true), current_user::text" }, toolContext())).rows).toEqual([["none", f.writer]]);
    // In the fixture's database the role may not, so the same query is refused and the role stays.
    await using confined = dbTool(f.writerUrl, { role: f.reader });
    await expect(confined.run({ sql: "SELECT set_config('role', 'none', true), current_user::text" }, toolContext())).rejects.toMatchObject({
      data: { sqlstate: "42501" },
    });
    expect((await confined.run({ sql: "SELECT current_user::text" }, toolContext())).rows).toEqual([[f.reader]]);
  });

  it("db_query - names the role that holds a signal grant: the login itself, or the configured role", async () => {
    const fn = "pg_catalog.pg_cancel_backend(integer)";
    try {
      await f.admin.query(`GRANT EXECUTE ON FUNCTION ${fn} TO ${f.writer}, ${f.reader}`);
      await using asLogin = dbTool(f.writerUrl);
      const err = await asLogin.run({ sql: "SELECT 1" }, toolContext()).catch((e: unknown) => e);
      // Without a role the login may use set_config('role', …) to become the reader, so both count.
      expect(err).toMatchObject({
        code: DbErrorCode.DB_LOGIN_NOT_CONFINED,
        data: {
          findings: [{ function: "pg_catalog.pg_cancel_backend(integer)", holders: [f.reader, f.writer].sort(), grantees: [f.reader, f.writer].sort() }],
        },
      });
      expect((err as Error).message).toContain(
        `REVOKE EXECUTE ON FUNCTION pg_catalog.pg_cancel_backend(integer) FROM ${[f.reader, f.writer].sort().join(", ")};`,
      );
      // With the role, which cannot leave itself here, only the role's own grant counts.
      await using asRole = dbTool(f.writerUrl, { role: f.reader });
      await expect(asRole.run({ sql: "SELECT 1" }, toolContext())).rejects.toMatchObject({
        data: { findings: [{ kind: "session_signals", holders: [f.reader], grantees: [f.reader] }] },
      });
    } finally {
      await f.admin.query(`REVOKE EXECUTE ON FUNCTION ${fn} FROM ${f.writer}, ${f.reader}`);
    }
  });

  it("db_query - an aborted call is cancelled on the server and its connection serves the next call", async () => {
    await using t = dbTool(f.writerUrl, { pool_size: 1, statement_timeout_ms: 60_000 });
    const ac = new AbortController();
    const running = t.run({ sql: "SELECT pg_sleep(30)" }, toolContext({ signal: ac.signal }));
    const active = () =>
      f.admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE usename = $1 AND state = 'active' AND query LIKE 'FETCH%'", [f.writer]);
    // Abort once the server is visibly running the query: a positive signal, not a guess.
    const pid = await poll(async () => (await active()).rows[0]?.pid, { timeoutMs: 10_000, what: "the query to start on the server" });
    ac.abort();
    const t0 = performance.now();
    await expect(running).rejects.toMatchObject({ code: DbErrorCode.DB_ABORTED });
    expect(performance.now() - t0).toBeLessThan(5000);
    expect((await active()).rowCount).toBe(0);
    expect((await t.run({ sql: "SELECT pg_backend_pid()" }, toolContext())).rows).toEqual([[pid]]);
  });
});
