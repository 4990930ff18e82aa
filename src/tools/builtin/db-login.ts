import type { Pool } from "pg";
import type { DbConfig } from "./db-config.js";
import { DbLoginMayWriteError, DbLoginNotConfinedError, DbPrivilegedLoginError, type LoginFinding } from "./db-errors.js";
import { IDENTITIES } from "./db-identities.js";
import { writePrivileges } from "./db-write-privileges.js";

/**
 * What db_query's login may do beyond reading, checked once before the first query. The
 * identity a query acts as is the configured `role`, or the login without one. Three kinds
 * of power survive a READ ONLY transaction, and any write privilege is refused besides:
 *
 * - server powers: a superuser, or a member of pg_execute_server_program,
 *   pg_read_server_files, pg_write_server_files or pg_signal_backend (COPY … TO PROGRAM,
 *   server files, any session). Refused unless `allow_privileged_login`.
 * - a role that does not hold: SET ROLE is only a setting, and a query that may execute
 *   set_config undoes it (`SELECT set_config('role', 'none', true), …`) and then acts as
 *   the login or any role the login is a member of. Function EXECUTE rights are checked
 *   against the current role when the query starts, so a role without EXECUTE on
 *   set_config cannot take that step. Refused unless `allow_role_reset`.
 * - signals: pg_cancel_backend and pg_terminate_backend (EXECUTE granted to PUBLIC by
 *   default) let a role cancel or end any session whose login it has the privileges of,
 *   always including its own login's other sessions: other agents' db_query calls, and the
 *   application's own sessions when it shares the login. Checked for every identity a
 *   query can reach. Refused unless `allow_session_signals`.
 * - writes: any write privilege of those identities (db-write-privileges.ts), because a
 *   read-only transaction stops table writes but not pg_logical_emit_message, a SECURITY
 *   DEFINER function or dblink. Refused unless `allow_write_privileges`.
 *
 * The refusal names the exact REVOKE statements (from PUBLIC, or from the role that holds
 * the grant) for the database the tool connects to: function privileges are per database.
 */

const SERVER_POWER_ROLES = ["pg_execute_server_program", "pg_read_server_files", "pg_write_server_files", "pg_signal_backend"];

/**
 * Refuses a login with powers beyond reading, unless the matching `allow_*` key is set.
 * Resolves with the login's name.
 * @throws DbPrivilegedLoginError for server powers (superuser, pg_* roles)
 * @throws DbLoginNotConfinedError for signal functions or a role set_config can undo
 * @throws DbLoginMayWriteError for any write privilege (db-write-privileges.ts)
 * @throws the driver's error when the check cannot run (the caller reports it as unavailable)
 */
export async function checkLogin(pool: Pool, config: DbConfig): Promise<string> {
  const powers = await serverPowers(pool);
  if (config.allowPrivilegedLogin) return powers.login;
  if (powers.powers.length > 0) throw new DbPrivilegedLoginError(powers.login, powers.powers);
  const findings = (await functionGrants(pool, config.role ?? null)).filter(
    (f) => f.holders.length > 0 && (f.kind === "role_reset" ? !config.allowRoleReset : !config.allowSessionSignals),
  );
  if (findings.length > 0) throw new DbLoginNotConfinedError({ login: powers.login, role: config.role, database: powers.database, findings });
  if (!config.allowWritePrivileges) {
    const writes = await writePrivileges(pool, config.role ?? null);
    if (writes.length > 0) throw new DbLoginMayWriteError({ login: powers.login, role: config.role, database: powers.database, findings: writes });
  }
  return powers.login;
}

/** The login, its database, and its server powers (also through any role it may SET ROLE to). */
async function serverPowers(pool: Pool): Promise<{ login: string; database: string; powers: string[] }> {
  const r = await pool.query<{ login: string; database: string; rolsuper: boolean; members: string[]; supers: string[] }>(
    `
    SELECT s.rolname::text AS login, current_database()::text AS database, s.rolsuper,
           coalesce(array_agg(g.rolname::text ORDER BY g.rolname) FILTER (WHERE g.rolname = ANY ($1::text[])), '{}') AS members,
           coalesce(array_agg(g.rolname::text ORDER BY g.rolname) FILTER (WHERE g.rolsuper), '{}') AS supers
      FROM pg_roles s
      LEFT JOIN pg_roles g
        ON g.oid <> s.oid AND (g.rolname = ANY ($1::text[]) OR g.rolsuper) AND pg_has_role(s.oid, g.oid, 'MEMBER')
     WHERE s.rolname = session_user
     GROUP BY s.rolname, s.rolsuper`,
    [SERVER_POWER_ROLES],
  );
  const row = r.rows[0]!;
  return {
    login: row.login,
    database: row.database,
    powers: [...(row.rolsuper ? ["superuser"] : []), ...row.members.map((m) => `member of ${m}`), ...row.supers.map((m) => `member of superuser role ${m}`)],
  };
}

/**
 * For set_config (only with a role) and the two signal functions: which identities a query
 * can act as may execute it (`holders`), and the grants that give it to them (`grantees`:
 * PUBLIC or a quoted role name), i.e. what to revoke. The reachable identities are the
 * role (or the login), plus, when that one may execute set_config, every role the login
 * is a member of, because set_config('role', …) accepts any of them.
 */
async function functionGrants(pool: Pool, role: string | null): Promise<LoginFinding[]> {
  const r = await pool.query<LoginFinding>(
    `
    WITH ${IDENTITIES},
         fn AS (SELECT p.oid, p.proname::text AS name, 'pg_catalog.' || p.oid::regprocedure::text AS sig,
                       coalesce(p.proacl, acldefault('f', p.proowner)) AS acl
                  FROM pg_proc p
                 WHERE p.pronamespace = 'pg_catalog'::regnamespace
                   AND p.proname IN ('set_config', 'pg_cancel_backend', 'pg_terminate_backend')),
         checks AS (SELECT 'role_reset' AS kind, fn.oid, fn.sig, fn.acl, ARRAY(SELECT oid FROM start) AS who
                      FROM fn WHERE fn.name = 'set_config' AND $1::text IS NOT NULL
                    UNION ALL
                    SELECT 'session_signals', fn.oid, fn.sig, fn.acl, ARRAY(SELECT oid FROM reach)
                      FROM fn WHERE fn.name <> 'set_config')
    SELECT c.kind, c.sig AS "function",
           ARRAY(SELECT r.rolname::text FROM pg_roles r
                  WHERE r.oid = ANY (c.who) AND has_function_privilege(r.oid, c.oid, 'EXECUTE') ORDER BY 1) AS holders,
           ARRAY(SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.rolname) END
                   FROM aclexplode(c.acl) a LEFT JOIN pg_roles g ON g.oid = a.grantee
                  WHERE a.privilege_type = 'EXECUTE'
                    AND (a.grantee = 0 OR EXISTS (SELECT 1 FROM unnest(c.who) w WHERE pg_has_role(w, a.grantee, 'USAGE')))
                  ORDER BY 1) AS grantees
      FROM checks c
     ORDER BY c.kind, c.sig`,
    [role],
  );
  return r.rows;
}
