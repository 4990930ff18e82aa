import { randomBytes } from "node:crypto";
import { chmod, stat } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isKovaError } from "../../src/core/errors.js";
import { createLogger } from "../../src/core/logger.js";
import { createDbTool, dbConfigFrom, type DbTool } from "../../src/tools/builtin/db.js";
import { DbErrorCode, type WriteFinding } from "../../src/tools/builtin/db-errors.js";
import { poll } from "../fixtures/poll.js";
import { loadCorpus } from "../fixtures/security/corpus.js";
import { defer, tempDir } from "../fixtures/disposable.js";
import { toolContext } from "../fixtures/tool-call.js";

const silent = createLogger({ level: "silent" });
const ADMIN_URL = "postgres://postgres@127.0.0.1:5432/test";

/** The functions whose EXECUTE right db_query's start-up check requires the query's identities not to hold. */
const SIGNAL_FUNCTIONS = "pg_catalog.pg_terminate_backend(integer, bigint), pg_catalog.pg_cancel_backend(integer)";
const SET_CONFIG = "pg_catalog.set_config(text, text, boolean)";
const EMIT_MESSAGE = "pg_catalog.pg_logical_emit_message(boolean, text, text), pg_catalog.pg_logical_emit_message(boolean, text, bytea)";

/**
 * A database of its own (function privileges are per database, so revoking them here
 * touches nobody else's tests) with a table, a sequence and SECURITY DEFINER writers, plus
 * two roles: a login that holds write grants on all of it, and a NOLOGIN reader with SELECT
 * only that the login may SET ROLE to. The database is set up the way docs/tools-shell-db.md
 * asks: the signal functions, pg_logical_emit_message and set_config revoked from PUBLIC,
 * set_config granted back to the login alone (so without a role a query may still call it,
 * and the read-only transaction must hold; with the role it may not, so the role holds),
 * and the SECURITY DEFINER writers and dblink executable by the login alone. `kova_exec`
 * runs any statement as its caller (a plpgsql EXECUTE): what a query can do to its session
 * through a function. pg_walinspect lets the test read the WAL. Everything is dropped on
 * dispose.
 */
async function pgFixture() {
  const sfx = randomBytes(4).toString("hex");
  const names = {
    database: `kova_t_${sfx}`,
    schema: `kova_t_${sfx}`,
    table: "items",
    seq: "items_seq",
    writer: `kova_rw_${sfx}`,
    reader: `kova_ro_${sfx}`,
    /** The prefix of every logical message a test entry would write, so the WAL can be searched for it. */
    messagePrefix: `kova-msg-${sfx}`,
  };
  const { database, schema, table, seq, writer, reader } = names;
  const server = new pg.Client({ connectionString: ADMIN_URL });
  await server.connect();
  // template0 accepts no connections, so the copy never waits for another test's session on template1.
  await server.query(`CREATE DATABASE ${database} TEMPLATE template0`);
  await server.query(`CREATE ROLE ${writer} LOGIN; CREATE ROLE ${reader} NOLOGIN; GRANT ${reader} TO ${writer}`);
  const admin = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:5432/${database}` });
  await admin.connect();
  await admin.query(`
    REVOKE EXECUTE ON FUNCTION ${SIGNAL_FUNCTIONS}, ${SET_CONFIG}, ${EMIT_MESSAGE} FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION ${SET_CONFIG} TO ${writer};
    CREATE EXTENSION pg_walinspect;
    CREATE SCHEMA ${schema};
    CREATE TABLE ${schema}.${table} (id int PRIMARY KEY, name text NOT NULL, born timestamp, big bigint, price numeric, doc jsonb, ok boolean);
    INSERT INTO ${schema}.${table} VALUES
      (1, 'one', '2024-01-02 03:04:05', 9007199254740993, 1.10, '{"a": 1}', true),
      (2, 'two', NULL, NULL, NULL, NULL, false),
      (3, 'three', NULL, NULL, NULL, NULL, NULL);
    CREATE SEQUENCE ${schema}.${seq};
    CREATE FUNCTION ${schema}.kova_writer() RETURNS int LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN DELETE FROM ${schema}.${table}; RETURN 1; END $$;
    CREATE PROCEDURE ${schema}.kova_writer_proc() LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN DELETE FROM ${schema}.${table}; END $$;
    REVOKE EXECUTE ON FUNCTION ${schema}.kova_writer() FROM PUBLIC;
    REVOKE EXECUTE ON PROCEDURE ${schema}.kova_writer_proc() FROM PUBLIC;
    GRANT USAGE, CREATE ON SCHEMA ${schema} TO ${writer};
    GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON ${schema}.${table} TO ${writer};
    GRANT USAGE, SELECT, UPDATE ON SEQUENCE ${schema}.${seq} TO ${writer};
    GRANT EXECUTE ON FUNCTION ${schema}.kova_writer() TO ${writer};
    GRANT EXECUTE ON PROCEDURE ${schema}.kova_writer_proc() TO ${writer};
    GRANT USAGE ON SCHEMA ${schema} TO ${reader};
    GRANT SELECT ON ${schema}.${table} TO ${reader};`);
  const dblink = (await admin.query("SELECT 1 FROM pg_available_extensions WHERE name = 'dblink'")).rowCount === 1;
  if (dblink) {
    await admin.query(`CREATE EXTENSION dblink SCHEMA ${schema}; REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA ${schema} FROM PUBLIC;
                       GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${schema} TO ${writer}`);
  }
  // The WAL a test reads back must not be recycled by a checkpoint meanwhile: a temporary
  // slot of the admin session holds it, and goes with the session even if the test dies.
  await admin.query("SELECT pg_create_physical_replication_slot($1, true, true)", [`kova_wal_${sfx}`]);
  // Created after the revoke above: PUBLIC keeps EXECUTE on it, as on any new function.
  await admin.query(
    `CREATE FUNCTION ${schema}.kova_exec(statement text) RETURNS int LANGUAGE plpgsql VOLATILE AS $$ BEGIN EXECUTE statement; RETURN 1; END $$`,
  );
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

/**
 * What a call's session looks like to the next call: who it runs as, whether it is read-only,
 * random()'s next value, and state a call could set in its session (prepared statements,
 * LISTEN, a custom setting, the search_path).
 */
const NEXT_CALL = `SELECT current_user::text, current_setting('transaction_read_only'), random(),
  (SELECT count(*) FROM pg_prepared_statements)::int, (SELECT count(*) FROM pg_listening_channels())::int,
  current_setting('kova.leak', true), current_setting('search_path')`;
const CLEAN_SESSION = [0, 0, null, '"$user", public'];

/** The value random() gives right after setseed(0.5): what the next call would see if a seed survived. */
async function seededRandom(): Promise<number> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  await using _client = defer(() => c.end());
  await c.query("SELECT setseed(0.5)");
  return (await c.query("SELECT random() AS r")).rows[0].r as number;
}

/** An LSN (`16/B374D848`) as a number, to order WAL positions. */
function lsnValue(text: string): bigint {
  const [hi = "0", lo = "0"] = text.split("/");
  return (BigInt(`0x${hi}`) << 32n) + BigInt(`0x${lo}`);
}

/** The WAL position flushed now (a start for pg_walinspect, which reads only flushed WAL). */
async function walFlushed(f: PgFixture): Promise<string> {
  return (await f.admin.query("SELECT pg_current_wal_flush_lsn()::text AS lsn")).rows[0].lsn as string;
}

/**
 * Flushes all WAL inserted so far and returns where it ends. WAL of a transaction that
 * committed nothing (a rolled-back call, a non-transactional message) is flushed by the WAL
 * writer only page by page, so the tail may wait for other traffic; a committed transaction
 * that wrote WAL is flushed at its commit (synchronous_commit), with everything before it.
 */
async function flushWal(f: PgFixture): Promise<string> {
  await f.admin.query("SELECT pg_logical_emit_message(true, 'kova-test-flush', '')");
  return walFlushed(f);
}

/** Where the WAL written since `from` holds a logical message with the fixture's prefix. */
async function loggedMessages(f: PgFixture, from: string): Promise<bigint[]> {
  const end = await flushWal(f);
  const r = await f.admin.query(
    `SELECT start_lsn::text AS lsn FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
      WHERE resource_manager = 'LogicalMessage' AND description LIKE $3`,
    [from, end, `%prefix "${f.messagePrefix}"%`],
  );
  return r.rows.map((row) => lsnValue(row.lsn as string));
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
        .replaceAll("{writer_proc}", "kova_writer_proc")
        .replaceAll("{message_prefix}", f.messagePrefix);
    const seeded = await seededRandom();
    const before = await snapshot(f);
    const walStart = await walFlushed(f);
    const entryStarts: Array<{ lsn: bigint; label: string }> = [];
    const violations: string[] = [];
    const report: string[] = [];
    // Pass A leans on the read-only transaction and the one-query rule alone (the login may
    // write, so the start-up check is told to accept it); pass B adds a role without write
    // grants, which the check accepts as it is.
    for (const pass of [
      { label: "login with write grants", role: undefined, expectUser: f.writer, extra: { allow_write_privileges: true } },
      { label: `and role ${f.reader}`, role: f.reader, expectUser: f.reader, extra: {} },
    ]) {
      // One call at a time, so whatever an entry leaves in its session would meet the next call.
      await using tool = dbTool(f.writerUrl, { pool_size: 1, statement_timeout_ms: 3000, ...pass.extra, ...(pass.role ? { role: pass.role } : {}) });
      report.push(`-- pass: ${pass.label}`);
      for (const entry of corpus) {
        const sql = fill(entry.text);
        const fail = (what: string) => violations.push(`${pass.label} / ${entry.name}: ${what}`);
        entryStarts.push({
          lsn: lsnValue((await f.admin.query("SELECT pg_current_wal_insert_lsn()::text AS lsn")).rows[0].lsn),
          label: `${pass.label} / ${entry.name}`,
        });
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
        const next = await tool.run({ sql: NEXT_CALL }, toolContext());
        const [user, readOnly, random, ...state] = next.rows[0]!;
        if (user !== pass.expectUser || readOnly !== "on") fail(`the next call ran as ${JSON.stringify(next.rows[0])}`);
        if (random === seeded) fail("the next call's random() followed the seed a call set");
        if (JSON.stringify(state) !== JSON.stringify(CLEAN_SESSION)) fail(`the next call's session kept state: ${JSON.stringify(state)}`);
        report.push(`${violations.some((v) => v.startsWith(`${pass.label} / ${entry.name}:`)) ? "FAIL" : "ok  "} ${entry.name.padEnd(36)} ${outcome}`);
      }
    }
    // Logical messages are WAL records that no snapshot shows: read the WAL the corpus ran over.
    for (const lsn of await loggedMessages(f, walStart)) {
      const entry = entryStarts.filter((e) => e.lsn <= lsn).pop();
      violations.push(`${entry?.label ?? "before the first entry"}: wrote a logical message into the WAL`);
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
    // As the reader role: the login itself holds write grants, which the start-up check refuses.
    tool = dbTool(f.writerUrl, { role: f.reader, max_rows: 2, statement_timeout_ms: 400 });
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
    expect(performance.now() - t0).toBeLessThan(15_000); // the statement timeout, not the 30 s sleep
    expect((await tool.run({ sql: "SELECT 1" }, toolContext())).rows).toEqual([[1]]);
  });

  it("db_query - a call whose backend the server ends mid-query fails with an error (never an uncaught exception) and the next call works", async () => {
    await using slow = dbTool(f.writerUrl, { role: f.reader, pool_size: 1, statement_timeout_ms: 20_000 });
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

  it("db_query - nothing a call sets reaches the next call: random()'s seed, settings, prepared statements, LISTEN, advisory locks", async () => {
    // One session at a time, so a reused backend would carry the first call's state into the second.
    await using t = dbTool(f.writerUrl, { role: f.reader, pool_size: 1 });
    const exec = (statement: string) => `${f.schema}.kova_exec(${pg.escapeLiteral(statement)})`;
    await t.run(
      {
        sql: `SELECT setseed(0.5), pg_advisory_lock(4343), ${exec("SET search_path = pg_catalog")}, ${exec("SET kova.leak = 'x'")},
                     ${exec("PREPARE kova_prepared AS SELECT 1")}, ${exec("LISTEN kova_channel")}`,
      },
      toolContext(),
    );
    const next = await t.run({ sql: NEXT_CALL }, toolContext());
    const [user, readOnly, random, ...state] = next.rows[0]!;
    expect([user, readOnly]).toEqual([f.reader, "on"]);
    // DISCARD ALL alone left this: the seed survives it (and a custom setting stays defined, empty).
    expect(random).not.toBe(await seededRandom());
    expect(state).toEqual(CLEAN_SESSION);
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
    await using lax = dbTool(f.writerDefaultsUrl, { allow_session_signals: true, allow_write_privileges: true });
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
    await using lax = dbTool(f.writerDefaultsUrl, { role: f.reader, allow_session_signals: true, allow_role_reset: true, allow_write_privileges: true });
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

  it("db_query - refuses a login that may write WAL with pg_logical_emit_message (PUBLIC by default), naming the REVOKE; with the opt-out one SELECT writes 1 MB of WAL", async () => {
    // The shared database keeps PostgreSQL's defaults: EXECUTE on pg_logical_emit_message for PUBLIC.
    await using strict = dbTool(f.writerDefaultsUrl, { allow_session_signals: true });
    const err = await strict.run({ sql: "SELECT 1" }, toolContext()).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: DbErrorCode.DB_LOGIN_MAY_WRITE, data: { login: f.writer, database: "test" } });
    const findings = (err as { data: { findings: WriteFinding[] } }).data.findings;
    for (const variant of ["text", "bytea"]) {
      expect(findings).toContainEqual({
        kind: "function",
        object: `pg_catalog.pg_logical_emit_message(boolean, text, ${variant})`,
        privileges: ["EXECUTE"],
        holders: expect.arrayContaining([f.writer]),
        grantees: ["PUBLIC"],
        owners: [],
      });
    }
    expect((err as Error).message).toContain(
      "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, bytea), pg_catalog.pg_logical_emit_message(boolean, text, text) FROM PUBLIC;",
    );
    expect((err as Error).message).toContain("allow_write_privileges = true");
    await expect(strict.run({ sql: "SELECT 1" }, toolContext())).rejects.toMatchObject({ code: DbErrorCode.DB_LOGIN_MAY_WRITE });

    // Why: granted to the role, one read-only SELECT writes 1 MB of WAL that its ROLLBACK keeps.
    try {
      await f.admin.query(`GRANT EXECUTE ON FUNCTION ${EMIT_MESSAGE} TO ${f.reader}`);
      await using asRole = dbTool(f.writerUrl, { role: f.reader });
      await expect(asRole.run({ sql: "SELECT 1" }, toolContext())).rejects.toMatchObject({
        code: DbErrorCode.DB_LOGIN_MAY_WRITE,
        data: { role: f.reader, findings: [{ object: "pg_catalog.pg_logical_emit_message(boolean, text, bytea)", grantees: [f.reader] }, {}] },
      });
      await using lax = dbTool(f.writerUrl, { role: f.reader, allow_write_privileges: true });
      const sql = "SELECT pg_logical_emit_message(false, $1, repeat('W', 1000000))::text";
      const lsn = (await lax.run({ sql, params: [f.messagePrefix] }, toolContext())).rows[0]![0] as string;
      expect(lsnValue(await flushWal(f))).toBeGreaterThanOrEqual(lsnValue(lsn));
      // The LSN returned is where the record ends: look in the megabyte before it.
      const record = await f.admin.query(
        `SELECT record_length, left(description, 80) AS description FROM pg_get_wal_records_info($1::pg_lsn - 1100000, $1::pg_lsn)
          WHERE resource_manager = 'LogicalMessage' AND description LIKE $2`,
        [lsn, `%prefix "${f.messagePrefix}"%`],
      );
      expect(record.rows).toEqual([
        { record_length: expect.any(Number), description: expect.stringContaining(`non-transactional, prefix "${f.messagePrefix}"; payload (1000000 bytes)`) },
      ]);
      expect(record.rows[0].record_length).toBeGreaterThan(1_000_000);
    } finally {
      await f.admin.query(`REVOKE EXECUTE ON FUNCTION ${EMIT_MESSAGE} FROM ${f.reader}`);
    }
  });

  it("db_query - refuses a login with write grants on tables, sequences, schemas, SECURITY DEFINER functions and dblink, naming each REVOKE", async () => {
    await using t = dbTool(f.writerUrl);
    const err = await t.run({ sql: "SELECT 1" }, toolContext()).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: DbErrorCode.DB_LOGIN_MAY_WRITE, data: { login: f.writer, database: f.database } });
    const findings = (err as { data: { findings: WriteFinding[] } }).data.findings;
    // The login may run set_config, so it can act as the reader too; the reader holds none of these.
    const mine = (kind: WriteFinding["kind"], object: string, privileges: string[]) => ({
      kind,
      object,
      privileges,
      holders: [f.writer],
      grantees: [f.writer],
      owners: [],
    });
    expect(findings).toEqual(
      expect.arrayContaining([
        mine("table", `${f.schema}.items`, ["DELETE", "INSERT", "REFERENCES", "TRIGGER", "TRUNCATE", "UPDATE"]),
        mine("sequence", `${f.schema}.items_seq`, ["UPDATE", "USAGE"]),
        mine("schema", f.schema, ["CREATE"]),
        mine("function", `${f.schema}.kova_writer()`, ["EXECUTE"]),
        mine("procedure", `${f.schema}.kova_writer_proc()`, ["EXECUTE"]),
      ]),
    );
    if (f.dblink)
      expect(findings).toContainEqual(
        expect.objectContaining({ kind: "function", object: expect.stringMatching(new RegExp(`^${f.schema}\\.dblink_exec\\(`)) }),
      );
    // kova_exec runs as its caller in a trusted language: calling it grants nothing.
    expect(findings.some((x) => x.object.includes("kova_exec"))).toBe(false);
    const message = (err as Error).message;
    expect(message).toContain(`REVOKE DELETE, INSERT, REFERENCES, TRIGGER, TRUNCATE, UPDATE ON TABLE ${f.schema}.items FROM ${f.writer};`);
    expect(message).toContain(`REVOKE EXECUTE ON PROCEDURE ${f.schema}.kova_writer_proc() FROM ${f.writer};`);
  });

  it("db_query - refuses a role with a writer's attributes or membership (CREATEDB, pg_write_all_data), naming the ALTER ROLE and REVOKE", async () => {
    try {
      await f.admin.query(`ALTER ROLE ${f.reader} CREATEDB; GRANT pg_write_all_data TO ${f.reader}`);
      await using t = dbTool(f.writerUrl, { role: f.reader });
      const err = await t.run({ sql: "SELECT 1" }, toolContext()).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: DbErrorCode.DB_LOGIN_MAY_WRITE, data: { role: f.reader } });
      const findings = (err as { data: { findings: WriteFinding[] } }).data.findings;
      expect(findings).toContainEqual({ kind: "role attribute", object: f.reader, privileges: ["CREATEDB"], holders: [f.reader], grantees: [], owners: [] });
      expect(findings).toContainEqual({
        kind: "role membership",
        object: "pg_write_all_data",
        privileges: ["MEMBER"],
        holders: [f.reader],
        grantees: [f.reader],
        owners: [],
      });
      // pg_write_all_data reaches the fixture's table too.
      expect(findings).toContainEqual(expect.objectContaining({ kind: "table", object: `${f.schema}.items`, holders: [f.reader] }));
      expect((err as Error).message).toContain(`ALTER ROLE ${f.reader} NOCREATEDB;`);
      expect((err as Error).message).toContain(`REVOKE pg_write_all_data FROM ${f.reader};`);
    } finally {
      await f.admin.query(`ALTER ROLE ${f.reader} NOCREATEDB; REVOKE pg_write_all_data FROM ${f.reader}`);
    }
  });

  it("db_query - an aborted call is cancelled on the server and the next call runs", async () => {
    await using t = dbTool(f.writerUrl, { role: f.reader, pool_size: 1, statement_timeout_ms: 60_000 });
    const ac = new AbortController();
    const running = t.run({ sql: "SELECT pg_sleep(30)" }, toolContext({ signal: ac.signal }));
    const active = () =>
      f.admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE usename = $1 AND state = 'active' AND query LIKE 'FETCH%'", [f.writer]);
    // Abort once the server is visibly running the query: a positive signal, not a guess.
    const pid = await poll(async () => (await active()).rows[0]?.pid, { timeoutMs: 10_000, what: "the query to start on the server" });
    ac.abort();
    const t0 = performance.now();
    await expect(running).rejects.toMatchObject({ code: DbErrorCode.DB_ABORTED });
    expect(performance.now() - t0).toBeLessThan(15_000); // the cancel, not the 30 s sleep
    // Each call has a session of its own, so only the cancel stops the sleep this soon: a
    // backend does not notice its client's closed socket while it sleeps.
    expect((await active()).rowCount).toBe(0);
    expect((await f.admin.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", [pid])).rowCount).toBe(0);
    expect((await t.run({ sql: "SELECT 1" }, toolContext())).rows).toEqual([[1]]);
  });
});
