/** SQL shared by db_query's start-up checks (db-login.ts, db-write-privileges.ts). */

/**
 * The identities a query can act as, as CTEs over the `$1` parameter (the configured role,
 * or null): `start` is the role, or the login without one; `reach` adds, when `start`
 * may execute set_config, every role the login is a member of, because
 * set_config('role', …) accepts any of them.
 */
export const IDENTITIES = `
         login AS (SELECT oid FROM pg_roles WHERE rolname = session_user),
         start AS (SELECT coalesce((SELECT oid FROM pg_roles WHERE rolname = $1::text), (SELECT oid FROM login)) AS oid),
         reset AS (SELECT has_function_privilege(start.oid, 'pg_catalog.set_config(text,text,boolean)', 'EXECUTE') AS yes FROM start),
         reach AS (SELECT oid FROM start
                   UNION
                   SELECT r.oid FROM pg_roles r, login, reset WHERE reset.yes AND pg_has_role(login.oid, r.oid, 'MEMBER'))`;
