import { boolAt, intAt, keyOf, rejectUnknown, secretAt, stringAt, type ConfigTable, ConfigError } from "../../core/index.js";

/**
 * `[tools.db]`, parsed. The connection URL (with its password) never appears in the file:
 * `url_env` names an environment variable, or `url_file` a file, that holds it.
 *
 * ```toml
 * [tools.db]
 * url_env = "KOVA_DB_URL"        # postgres://kova_reader@db:5432/app
 * role = "kova_readonly"         # optional: SET LOCAL ROLE for every query
 * statement_timeout_ms = 5000
 * max_rows = 1000                # rows returned; more are reported as truncated
 * pool_size = 2
 * connect_timeout_ms = 5000
 * allow_privileged_login = false # true lets a superuser login run queries (not recommended)
 * allow_session_signals = false  # true accepts a login that may run pg_cancel_backend / pg_terminate_backend
 * allow_role_reset = false       # true accepts a role that may run set_config, so a query can drop it
 * allow_write_privileges = false # true accepts an identity with write privileges (pg_logical_emit_message included)
 * ```
 *
 * The four `allow_*` keys accept what db.ts's start-up check (db-login.ts) refuses; each
 * names one thing a query could otherwise do beyond reading.
 */
export interface DbConfig {
  /** Secret: never log it. */
  url: string;
  role?: string;
  statementTimeoutMs: number;
  maxRows: number;
  poolSize: number;
  connectTimeoutMs: number;
  /** Skips the whole login check (a superuser login is then accepted as well). */
  allowPrivilegedLogin: boolean;
  /** Accepts a login (or role) that may cancel or end other sessions of the same login. */
  allowSessionSignals: boolean;
  /** Accepts a `role` that a query can undo with set_config('role', 'none', true). */
  allowRoleReset: boolean;
  /** Accepts an identity that holds write privileges; the read-only transaction then stops only the transactional writes. */
  allowWritePrivileges: boolean;
}

const KEYS = [
  "url",
  "url_env",
  "url_file",
  "role",
  "statement_timeout_ms",
  "max_rows",
  "pool_size",
  "connect_timeout_ms",
  "allow_privileged_login",
  "allow_session_signals",
  "allow_role_reset",
  "allow_write_privileges",
] as const;

const ROLE = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/**
 * Parses `[tools.db]`. `keyPrefix` is how the table is written in the file (`tools.db`);
 * `env` holds the variable `url_env` names.
 * @throws ConfigError naming the key as written in the file and the fix (never quoting the URL)
 */
export function dbConfigFrom(table: ConfigTable | undefined, keyPrefix = "tools.db", env: NodeJS.ProcessEnv = process.env): DbConfig {
  const t = table ?? {};
  rejectUnknown(t, KEYS, `${keyPrefix}.`);
  const url = secretAt(t, keyPrefix, "url", env, "KOVA_DB_URL");
  if (!/^postgres(ql)?:\/\/[^\s]+$/.test(url)) {
    const source = t.url_env !== undefined ? `environment variable ${String(t.url_env)}` : `file ${String(t.url_file)}`;
    throw new ConfigError(
      keyOf(keyPrefix, t.url_env !== undefined ? "url_env" : "url_file"),
      `${source} does not hold a PostgreSQL URL: write it as postgres://user@host:5432/database`,
    );
  }
  const config: DbConfig = {
    url,
    statementTimeoutMs: intAt(t, keyPrefix, "statement_timeout_ms", 10, 3_600_000) ?? 5000,
    maxRows: intAt(t, keyPrefix, "max_rows", 1, 1_000_000) ?? 1000,
    poolSize: intAt(t, keyPrefix, "pool_size", 1, 100) ?? 2,
    connectTimeoutMs: intAt(t, keyPrefix, "connect_timeout_ms", 100, 600_000) ?? 5000,
    allowPrivilegedLogin: boolAt(t, keyPrefix, "allow_privileged_login") ?? false,
    allowSessionSignals: boolAt(t, keyPrefix, "allow_session_signals") ?? false,
    allowRoleReset: boolAt(t, keyPrefix, "allow_role_reset") ?? false,
    allowWritePrivileges: boolAt(t, keyPrefix, "allow_write_privileges") ?? false,
  };
  const role = stringAt(t, keyPrefix, "role");
  if (role !== undefined) {
    if (!ROLE.test(role)) {
      throw new ConfigError(
        keyOf(keyPrefix, "role"),
        `${JSON.stringify(role)} is not a role name: use 1-63 letters, digits, _ or $, starting with a letter or _`,
      );
    }
    config.role = role;
  }
  return config;
}
