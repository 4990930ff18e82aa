import type { FieldDef, Pool, PoolClient, QueryArrayConfig } from "pg";
import { ArgumentError, isKovaError, type KovaError, type Logger, componentLogger } from "../../core/index.js";
import type { Tool, ToolContext } from "../types.js";
import type { DbConfig } from "./db-config.js";
import { cancelTarget, sendCancelRequest, type CancelTarget } from "./db-cancel.js";
import { DbAbortedError, DbMultipleStatementsError, DbNotAQueryError, DbQueryError, DbStatementTimeoutError, DbUnavailableError } from "./db-errors.js";
import { checkLogin } from "./db-login.js";
import { inspectSql } from "./db-sql.js";

export { dbConfigFrom, type DbConfig } from "./db-config.js";

type Scalar = string | number | boolean | null;

/** db_query's arguments as the model writes them. */
export interface DbArgs {
  sql: string;
  /** Bound to $1, $2, … in order; never spliced into the text. */
  params?: Array<Scalar | Scalar[]>;
}

export interface DbResult {
  columns: Array<{ name: string; type: string }>;
  /** One array per row, in column order (names may repeat, so not objects). */
  rows: unknown[][];
  rowCount: number;
  /** The query had more than max_rows rows; only the first max_rows are here. */
  truncated: boolean;
  durationMs: number;
}

/** The db_query tool; `close()` ends its connection pool. */
export interface DbTool extends Tool<DbArgs, DbResult>, AsyncDisposable {
  run(args: DbArgs, ctx: ToolContext): Promise<DbResult>;
  close(): Promise<void>;
}

const QUERY_KEYWORDS = new Set(["select", "with", "values", "table"]);
const MAX_SQL_CHARS = 100_000;
const MAX_PARAMS = 1000;
const CURSOR_PREFIX = "DECLARE kova_query NO SCROLL CURSOR FOR ";
/** How much longer than statement_timeout the client waits before it gives the connection up. */
const CLIENT_GRACE_MS = 5000;

/**
 * Values the model can use directly keep their JSON type (booleans, 2- and 4-byte
 * integers, finite floats, json/jsonb); everything else stays PostgreSQL's text form, so
 * bigint and numeric keep their digits and timestamps are not shifted into a JS Date.
 */
const PARSERS: Record<number, (text: string) => unknown> = {
  16: (v) => v === "t",
  21: Number,
  23: Number,
  26: Number,
  700: finiteOrText,
  701: finiteOrText,
  114: (v) => JSON.parse(v),
  3802: (v) => JSON.parse(v),
};
const TYPES = { getTypeParser: ((oid: number) => PARSERS[oid] ?? ((v: string) => v)) as never };

/**
 * Creates `db_query`: one read-only query per call against PostgreSQL. Each call:
 * refuses anything but a single SELECT / WITH / VALUES / TABLE before sending; then, on a
 * pooled connection, `BEGIN READ ONLY`, statement and idle timeouts and the optional
 * role as `SET LOCAL` (statements, not set_config calls, so neither the login nor the
 * role needs EXECUTE on set_config), the query as a cursor (`DECLARE … CURSOR FOR`,
 * which PostgreSQL itself only accepts for a SELECT or VALUES without data-modifying
 * CTEs) through the extended protocol with bind parameters, `FETCH max_rows + 1`, and
 * always `ROLLBACK; DISCARD ALL` (advisory locks are released before the result is
 * returned); then the session ends: every call has a session of its own, because some
 * session state survives DISCARD ALL (the random() seed). Before the first query the
 * login is checked (db-login.ts): server powers, signal functions a query could reach, a
 * role set_config could undo, and any write privilege are refused unless the matching
 * `allow_*` key is set, because a read-only transaction stops none of the first three
 * and not every write (pg_logical_emit_message). `pg` is imported on first use.
 * Idempotent: it never writes.
 */
export function createDbTool(config: DbConfig, logger: Logger): DbTool {
  const log = componentLogger(logger, "tools", { tool: "db_query" });
  let pool: Promise<{ pool: Pool; pg: typeof import("pg").default }> | undefined;
  let login: Promise<void> | undefined;
  let closed = false;

  const getPool = () => {
    pool ??= import("pg").then(({ default: pg }) => {
      const p = new pg.Pool({
        connectionString: config.url,
        max: config.poolSize,
        connectionTimeoutMillis: config.connectTimeoutMs,
        idleTimeoutMillis: 30_000,
        query_timeout: config.statementTimeoutMs + CLIENT_GRACE_MS,
        application_name: "kova-db_query",
        allowExitOnIdle: true,
        // One call per session: a session keeps state that neither ROLLBACK nor DISCARD ALL
        // resets (the random() seed setseed() sets, custom setting names, a dblink
        // connection, whatever an extension keeps per backend), so the next call, perhaps
        // another agent's, starts from a backend of its own.
        maxUses: 1,
      });
      // An idle pooled connection that the server drops emits here; unhandled, it would end the node.
      p.on("error", (err) => log.warn({ err: err.message }, "db_query: idle connection failed"));
      return { pool: p, pg };
    });
    return pool;
  };

  const loginChecked = (p: Pool): Promise<void> => {
    login ??= checkLogin(p, config).then(
      (name) => {
        const accepted = [
          config.allowPrivilegedLogin && "allow_privileged_login",
          config.allowSessionSignals && "allow_session_signals",
          config.allowRoleReset && "allow_role_reset",
          config.allowWritePrivileges && "allow_write_privileges",
        ].filter(Boolean);
        log.info({ login: name, role: config.role, accepted }, "db_query login checked: no power beyond reading, except what accepted lists");
      },
      (err: unknown) => {
        if (isKovaError(err)) throw err; // a refusal stays until the database or the config changes
        login = undefined; // a connection failure is worth another try on the next call
        throw new DbUnavailableError(errorText(err), { cause: err });
      },
    );
    return login;
  };

  const run = async (args: DbArgs, ctx: ToolContext): Promise<DbResult> => {
    if (closed) throw new DbUnavailableError("the tool was closed");
    const sql = sqlArg(args.sql);
    const params = paramsArg(args.params);
    const shape = inspectSql(sql);
    if (shape.statements > 1) throw new DbMultipleStatementsError(shape.statements);
    if (shape.statements === 0 || !QUERY_KEYWORDS.has(shape.firstKeyword ?? "")) throw new DbNotAQueryError(shape.firstKeyword);

    const { pool: p, pg } = await getPool();
    await loginChecked(p);
    const started = performance.now();
    let client: PoolClient;
    try {
      client = await p.connect();
    } catch (err) {
      throw new DbUnavailableError(errorText(err), { cause: err });
    }
    let broken = false;
    // The pool listens for errors of idle connections only: a checked-out one whose server
    // ends it (a restart, pg_terminate_backend) may emit "Connection terminated
    // unexpectedly", which without a listener is an uncaught exception that ends the node.
    const onConnectionError = (err: Error) => {
      broken = true;
      log.warn({ err: err.message, agentId: ctx.agentId, callId: ctx.callId }, "db_query: the connection failed during the call");
    };
    client.on("error", onConnectionError);
    const target = cancelTarget(client);
    let cancelling: Promise<unknown> | undefined;
    const onAbort = () => {
      // A backend does not notice a closed socket while it computes, so cancel the query the
      // way psql does; the connection itself stays usable and goes back to the pool.
      if (target) cancelling = cancelBackend(target, config, log, ctx);
    };
    ctx.signal.addEventListener("abort", onAbort, { once: true });
    try {
      if (ctx.signal.aborted) throw new DbAbortedError();
      const begin = [
        "BEGIN READ ONLY",
        `SET LOCAL statement_timeout = ${config.statementTimeoutMs}`,
        `SET LOCAL idle_in_transaction_session_timeout = ${config.statementTimeoutMs + CLIENT_GRACE_MS}`,
      ];
      if (config.role !== undefined) begin.push(`SET LOCAL ROLE ${pg.escapeIdentifier(config.role)}`);
      // Our own text only (numbers and a validated role name), so the simple protocol may carry all of it.
      await client.query(begin.join("; "));
      if (ctx.signal.aborted) throw new DbAbortedError();
      await client.query(extended({ text: CURSOR_PREFIX + shape.body, values: params }));
      const fetched = await client.query(extended({ text: `FETCH FORWARD ${config.maxRows + 1} FROM kova_query`, rowMode: "array", types: TYPES }));
      const truncated = fetched.rows.length > config.maxRows;
      const rows = truncated ? fetched.rows.slice(0, config.maxRows) : fetched.rows;
      const result: DbResult = {
        columns: fetched.fields.map((f: FieldDef) => ({ name: f.name, type: typeName(pg, f.dataTypeID) })),
        rows,
        rowCount: rows.length,
        truncated,
        durationMs: Math.round(performance.now() - started),
      };
      log.debug({ agentId: ctx.agentId, callId: ctx.callId, rows: rows.length, truncated, durationMs: result.durationMs }, "db_query done");
      return result;
    } catch (err) {
      if (!(err instanceof pg.DatabaseError)) broken = true;
      if (ctx.signal.aborted) throw new DbAbortedError({ cause: err });
      throw queryError(err, pg, config.statementTimeoutMs);
    } finally {
      ctx.signal.removeEventListener("abort", onAbort);
      // A cancel still on its way could hit the ROLLBACK or the next call's query.
      await cancelling;
      if (!broken) {
        try {
          // Two round trips: in one simple query the pair would run as an implicit transaction, which DISCARD ALL refuses.
          await client.query("ROLLBACK");
          await client.query("DISCARD ALL");
        } catch {
          broken = true;
        }
      }
      // The pool ends the session after this one use (maxUses 1); a broken one is dropped the same way.
      client.removeListener("error", onConnectionError);
      client.release(broken);
    }
  };

  const close = async () => {
    closed = true;
    const p = pool;
    pool = undefined;
    if (p) await (await p).pool.end();
  };

  return {
    name: "db_query",
    description: [
      "Runs one read-only SQL query (SELECT, WITH … SELECT, VALUES or TABLE) against PostgreSQL and returns columns and rows.",
      "Pass values as params and refer to them as $1, $2, …; never put values into the SQL text.",
      `At most ${config.maxRows} rows are returned (truncated says when there were more); a query is cancelled after ${config.statementTimeoutMs} ms.`,
      "Errors come back with the PostgreSQL SQLSTATE, message, hint and character position.",
    ].join(" "),
    parameters: {
      type: "object",
      properties: {
        sql: { type: "string", minLength: 1, maxLength: MAX_SQL_CHARS, description: "One query; parameters as $1, $2, …" },
        params: {
          type: "array",
          maxItems: MAX_PARAMS,
          description: "Values for $1, $2, … in order.",
          items: {
            anyOf: [{ type: ["string", "number", "boolean", "null"] }, { type: "array", items: { type: ["string", "number", "boolean", "null"] } }],
          },
        },
      },
      required: ["sql"],
      additionalProperties: false,
    },
    idempotent: true,
    run,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** Cancels the call's running query with a CancelRequest (db-cancel.ts: no SQL, no function privilege needed). */
async function cancelBackend(target: CancelTarget, config: DbConfig, log: Logger, ctx: ToolContext): Promise<void> {
  const failure = await sendCancelRequest(target, config.connectTimeoutMs);
  if (failure !== undefined) {
    log.warn(
      { err: failure, pid: target.processID, agentId: ctx.agentId, callId: ctx.callId },
      "db_query: could not cancel an aborted query; statement_timeout will end it",
    );
  }
}

function extended<T extends object>(config: T): T & QueryArrayConfig {
  // Always the extended protocol, also without parameters: it refuses a second statement.
  return { queryMode: "extended", ...config } as unknown as T & QueryArrayConfig;
}

function queryError(err: unknown, pg: typeof import("pg").default, timeoutMs: number): KovaError {
  if (err instanceof pg.DatabaseError) {
    // 57014 query_canceled: our own cancel (an abort) was sorted out by the caller before this,
    // so what is left is the transaction-local statement_timeout.
    if (err.code === "57014") return new DbStatementTimeoutError(timeoutMs, { cause: err });
    const position = err.position === undefined ? undefined : Number(err.position) - CURSOR_PREFIX.length;
    return new DbQueryError(
      {
        sqlstate: err.code ?? "XX000",
        message: err.message,
        ...(err.detail ? { detail: err.detail } : {}),
        ...(err.hint ? { hint: err.hint } : {}),
        ...(position !== undefined && position > 0 ? { position } : {}),
      },
      { cause: err },
    );
  }
  return new DbUnavailableError(errorText(err), { cause: err });
}

function sqlArg(sql: unknown): string {
  if (typeof sql !== "string" || sql.trim() === "") throw new ArgumentError("sql", "must be a non-empty string holding one query");
  if (sql.length > MAX_SQL_CHARS) throw new ArgumentError("sql", `is ${sql.length} characters; the limit is ${MAX_SQL_CHARS}`);
  if (sql.includes("\0")) throw new ArgumentError("sql", "must not contain a NUL character");
  return sql;
}

function paramsArg(params: unknown): Array<Scalar | Scalar[]> {
  if (params === undefined) return [];
  if (!Array.isArray(params)) throw new ArgumentError("params", "must be an array of values for $1, $2, …");
  if (params.length > MAX_PARAMS) throw new ArgumentError("params", `has ${params.length} values; the limit is ${MAX_PARAMS}`);
  params.forEach((v, i) => {
    const ok = isScalar(v) || (Array.isArray(v) && v.every(isScalar));
    if (!ok)
      throw new ArgumentError(`params[${i}]`, "must be a string, number, boolean, null or an array of those (pass JSON as a string and cast it: $1::jsonb)");
    if ((typeof v === "string" && v.includes("\0")) || (Array.isArray(v) && v.some((x) => typeof x === "string" && x.includes("\0")))) {
      throw new ArgumentError(`params[${i}]`, "must not contain a NUL character");
    }
  });
  return params as Array<Scalar | Scalar[]>;
}

function isScalar(v: unknown): v is Scalar {
  return v === null || typeof v === "string" || typeof v === "boolean" || (typeof v === "number" && Number.isFinite(v));
}

function finiteOrText(v: string): number | string {
  const n = Number(v);
  return Number.isFinite(n) ? n : v;
}

let typeNames: Map<number, string> | undefined;
function typeName(pg: typeof import("pg").default, oid: number): string {
  typeNames ??= new Map(Object.entries(pg.types.builtins).map(([name, id]) => [id as number, name.toLowerCase()]));
  return typeNames.get(oid) ?? `oid:${oid}`;
}

function errorText(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e?.code ? `${e.code} ${e.message}` : err instanceof Error ? err.message : String(err);
}
