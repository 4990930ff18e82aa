import { defineErrorCodes, KovaError, type KovaErrorOptions } from "../../core/index.js";

/** db_query's failures (prefix DB_, defined next to the tool so other built-ins add theirs apart). */
export const DbErrorCode = defineErrorCodes("tools", {
  DB_NOT_A_QUERY: "DB_NOT_A_QUERY",
  DB_MULTIPLE_STATEMENTS: "DB_MULTIPLE_STATEMENTS",
  DB_QUERY_FAILED: "DB_QUERY_FAILED",
  DB_STATEMENT_TIMEOUT: "DB_STATEMENT_TIMEOUT",
  DB_UNAVAILABLE: "DB_UNAVAILABLE",
  DB_PRIVILEGED_LOGIN: "DB_PRIVILEGED_LOGIN",
  DB_LOGIN_NOT_CONFINED: "DB_LOGIN_NOT_CONFINED",
  DB_LOGIN_MAY_WRITE: "DB_LOGIN_MAY_WRITE",
  DB_ABORTED: "DB_ABORTED",
});

/** Refused before sending: the text is not one read query (SELECT, WITH … SELECT, VALUES, TABLE). */
export class DbNotAQueryError extends KovaError {
  constructor(keyword: string | undefined) {
    super(
      DbErrorCode.DB_NOT_A_QUERY,
      `db_query runs one read-only query: SELECT, WITH … SELECT, VALUES or TABLE; ${keyword === undefined ? "no statement was given" : `${keyword.toUpperCase()} is not one`}. Nothing was sent to the database`,
      { data: { keyword } },
    );
  }
}

/** Refused before sending: more than one statement in the text. */
export class DbMultipleStatementsError extends KovaError {
  constructor(statements: number) {
    super(
      DbErrorCode.DB_MULTIPLE_STATEMENTS,
      `db_query runs exactly one statement; the text holds ${statements}. Send one query per call (without ';' between statements). Nothing was sent to the database`,
      { data: { statements } },
    );
  }
}

/** What PostgreSQL said about a failed query, for the model to correct it. */
export interface PgErrorFields {
  sqlstate: string;
  message: string;
  detail?: string;
  hint?: string;
  /** 1-based character position in the query text the model sent. */
  position?: number;
}

/**
 * SQLSTATE classes worth a retry: 08 connection, 40 transaction rollback (serialization,
 * deadlock), 53 insufficient resources, 57P0x server shutting down.
 */
const RETRYABLE = /^(08|40|53|57P0)/;

/** PostgreSQL refused or failed the query; `data` carries SQLSTATE, message, detail, hint and position. */
export class DbQueryError extends KovaError {
  constructor(
    readonly pg: PgErrorFields,
    options: KovaErrorOptions = {},
  ) {
    const extra = [pg.detail && `detail: ${pg.detail}`, pg.hint && `hint: ${pg.hint}`, pg.position && `at character ${pg.position}`].filter(Boolean).join("; ");
    super(DbErrorCode.DB_QUERY_FAILED, `PostgreSQL error ${pg.sqlstate}: ${pg.message}${extra ? ` (${extra})` : ""}`, {
      retryable: RETRYABLE.test(pg.sqlstate),
      ...options,
      data: pg,
    });
  }
}

/** The query ran past statement_timeout_ms and PostgreSQL cancelled it. */
export class DbStatementTimeoutError extends KovaError {
  constructor(timeoutMs: number, options: KovaErrorOptions = {}) {
    super(
      DbErrorCode.DB_STATEMENT_TIMEOUT,
      `the query ran longer than ${timeoutMs} ms and was cancelled; narrow it (a WHERE clause, an index, a LIMIT) and try again`,
      { ...options, data: { sqlstate: "57014", timeoutMs } },
    );
  }
}

/** The call's signal fired (interrupt, kill, lease loss): the query was cancelled on the server and has no result. */
export class DbAbortedError extends KovaError {
  constructor(options: KovaErrorOptions = {}) {
    super(DbErrorCode.DB_ABORTED, "db_query was aborted; the query was cancelled on the server", options);
  }
}

/** The database cannot be reached (connect failure, pool exhausted, connection lost). */
export class DbUnavailableError extends KovaError {
  constructor(reason: string, options: KovaErrorOptions = {}) {
    super(DbErrorCode.DB_UNAVAILABLE, `db_query cannot reach PostgreSQL: ${reason}`, { retryable: true, ...options, data: { reason } });
  }
}

/**
 * The login role can act outside the database even in a read-only transaction (a superuser
 * runs COPY … TO PROGRAM and ends other sessions; a member of pg_execute_server_program,
 * pg_read_server_files, pg_write_server_files or pg_signal_backend does part of that), and
 * SET ROLE cannot narrow it: a query undoes it with set_config('role', …).
 */
export class DbPrivilegedLoginError extends KovaError {
  constructor(login: string, powers: string[]) {
    super(
      DbErrorCode.DB_PRIVILEGED_LOGIN,
      `db_query refuses to run as ${login} (${powers.join(", ")}): a query could reach the server's files, programs or other sessions even in a read-only transaction, and a configured role does not stop it because set_config('role', …) undoes SET ROLE. Connect as a role without these rights (CREATE ROLE kova_reader LOGIN; GRANT SELECT ON … TO kova_reader), or set [tools.db] allow_privileged_login = true if you knowingly accept it`,
      { data: { login, powers } },
    );
  }
}

/** One function a query could use beyond reading, found by the start-up check (db-login.ts). */
export interface LoginFinding {
  /** role_reset: set_config undoes the configured role; session_signals: pg_cancel_backend / pg_terminate_backend. */
  kind: "role_reset" | "session_signals";
  /** Schema-qualified with its argument types, as REVOKE takes it: pg_catalog.set_config(text,text,boolean). */
  function: string;
  /** The roles a query can act as that may execute it. */
  holders: string[];
  /** Where their right comes from: PUBLIC or a (quoted) role name; what to revoke. */
  grantees: string[];
}

/**
 * The login (or the configured role) may do more than read even without server powers: cancel
 * or end other sessions of the same login, or undo the role inside a query. The message names
 * the REVOKE statements that close it and the `allow_*` key that accepts it instead.
 */
export class DbLoginNotConfinedError extends KovaError {
  constructor(info: { login: string; role: string | undefined; database: string; findings: LoginFinding[] }) {
    const { login, role, database, findings } = info;
    const reasons = findings.map((f) =>
      f.kind === "role_reset"
        ? `role ${role} may execute ${f.function}, so a query undoes the role (SELECT set_config('role', 'none', true), …) and acts as ${login}`
        : `${f.holders.join(", ")} may execute ${f.function}, so a query can ${f.function.includes("terminate") ? "end" : "cancel"} other sessions of the same login (other agents' db_query calls, or the application's own if it shares the login ${login})`,
    );
    const fix = findings.filter((f) => f.grantees.length > 0).map((f) => `REVOKE EXECUTE ON FUNCTION ${f.function} FROM ${f.grantees.join(", ")};`);
    const keys = [...new Set(findings.map((f) => (f.kind === "role_reset" ? "allow_role_reset" : "allow_session_signals")))];
    super(
      DbErrorCode.DB_LOGIN_NOT_CONFINED,
      `db_query refuses to run as ${login}${role ? ` with role ${role}` : ""}: ${reasons.join("; ")}. Run as a superuser in database ${database}: ${fix.join(" ")} and then GRANT EXECUTE ON FUNCTION … TO any other role that needs it (these rights are per database). Or set [tools.db] ${keys.map((k) => `${k} = true`).join(" and ")} if you knowingly accept it`,
      { data: { login, role, database, findings, fix, keys } },
    );
  }
}

/** One object a query's identities may write, found by the start-up check (db-write-privileges.ts). */
export interface WriteFinding {
  kind: "table" | "sequence" | "schema" | "database" | "large object" | "function" | "procedure" | "role attribute" | "role membership";
  /** As SQL names it: `app.items`, `app.f(integer)`, a large object's oid, a role. */
  object: string;
  /** INSERT, UPDATE, …, EXECUTE, CREATE; CREATEDB, CREATEROLE, REPLICATION; MEMBER. */
  privileges: string[];
  /** The roles a query can act as that hold them. */
  holders: string[];
  /** Where the privileges come from: PUBLIC or a (quoted) role name; what to revoke from. */
  grantees: string[];
  /** The object's owner when a holder owns it (an owner's rights cannot be revoked). */
  owners: string[];
}

/** Statements spelled out in the message, and objects named in each; `data.fix` has them whole. */
const SHOWN_STATEMENTS = 12;
const SHOWN_OBJECTS = 20;
/** Findings kept in `data` (a database where PUBLIC may write to every table could list thousands). */
const KEPT_FINDINGS = 200;

/**
 * The identity a query runs as may write: a table grant the read-only transaction stops,
 * or a function it does not stop (pg_logical_emit_message writes WAL that ROLLBACK keeps).
 * The message names the objects and the statements that take the privileges away, one per
 * kind of object, privileges and grantees.
 */
export class DbLoginMayWriteError extends KovaError {
  constructor(info: { login: string; role: string | undefined; database: string; findings: WriteFinding[] }) {
    const { login, role, database, findings } = info;
    const groups = groupFindings(findings);
    const reasons = groups.map((g) => `${g.holders.join(", ")} may ${g.privileges} ${g.kind} ${listed(g.objects, 3)}`);
    const shown = groups.slice(0, SHOWN_STATEMENTS).map((g) => g.fix(listed(g.objects, SHOWN_OBJECTS)));
    const more = groups.length > SHOWN_STATEMENTS ? ` … and ${groups.length - SHOWN_STATEMENTS} more statements (in the error's data)` : "";
    super(
      DbErrorCode.DB_LOGIN_MAY_WRITE,
      `db_query refuses to run as ${login}${role ? ` with role ${role}` : ""}: a query may write (${reasons.slice(0, SHOWN_STATEMENTS).join("; ")}), and a read-only transaction does not stop every write: pg_logical_emit_message writes WAL that ROLLBACK keeps, a SECURITY DEFINER function acts as its owner. Run as a superuser in database ${database}: ${shown.join(" ")}${more} Then GRANT back to other roles what they need. Or set [tools.db] allow_write_privileges = true if you knowingly accept it`,
      {
        data: {
          login,
          role,
          database,
          findings: findings.slice(0, KEPT_FINDINGS),
          total: findings.length,
          fix: groups.slice(0, KEPT_FINDINGS).map((g) => g.fix(listed(g.objects, KEPT_FINDINGS))),
          keys: ["allow_write_privileges"],
        },
      },
    );
  }
}

interface FindingGroup {
  kind: string;
  privileges: string;
  holders: string[];
  objects: string[];
  /** The statement for these objects (written as given). */
  fix(objects: string): string;
}

/** Findings that one statement fixes together: same kind, privileges, grantees and owners. */
function groupFindings(findings: WriteFinding[]): FindingGroup[] {
  const groups = new Map<string, FindingGroup>();
  for (const f of findings) {
    const key = JSON.stringify([f.kind, f.privileges, f.grantees, f.owners, f.kind === "role attribute" ? f.object : ""]);
    const group = groups.get(key);
    if (group) {
      group.objects.push(f.object);
      group.holders = [...new Set([...group.holders, ...f.holders])].sort();
    } else {
      groups.set(key, {
        kind: f.kind,
        privileges: f.privileges.join(", "),
        holders: [...f.holders],
        objects: [f.object],
        fix: (objects) => writeFix(f, objects),
      });
    }
  }
  return [...groups.values()];
}

function listed(objects: string[], at: number): string {
  return objects.length <= at ? objects.join(", ") : `${objects.slice(0, at).join(", ")} and ${objects.length - at} more`;
}

/** The statement that takes a finding's privileges away from its grantees (or names the owner to change), for `objects`. */
function writeFix(f: WriteFinding, objects: string): string {
  const from = f.grantees.join(", ");
  const privileges = f.privileges.join(", ");
  const owned = f.owners.length > 0 ? `(${objects}: owned by ${f.owners.join(", ")}, so give it another owner: ALTER … OWNER TO …)` : "";
  let revoke = "";
  if (f.kind === "role attribute") revoke = `ALTER ROLE ${f.object} ${f.privileges.map((p) => `NO${p}`).join(" ")};`;
  else if (f.kind === "role membership") revoke = from ? `REVOKE ${objects} FROM ${from};` : "";
  else if (from) revoke = `REVOKE ${privileges} ON ${f.kind === "table" ? "TABLE" : f.kind.toUpperCase()} ${objects} FROM ${from};`;
  return [revoke, owned].filter(Boolean).join(" ") || `(${objects}: revoke ${privileges} where it is granted)`;
}
