import type { Pool } from "pg";
import type { WriteFinding } from "./db-errors.js";
import { IDENTITIES } from "./db-identities.js";

/**
 * What the identities a db_query query can act as (db-identities.ts) may write, found in
 * the catalogs before the first query. A read-only transaction stops table writes, but not
 * everything a privilege allows: `pg_logical_emit_message(false, …)` writes WAL that a
 * ROLLBACK keeps (PostgreSQL grants it to PUBLIC), a SECURITY DEFINER function runs as its
 * owner, a function in an untrusted language (plpython3u, …) or dblink's reaches past the
 * transaction. The check does not weigh which privileges the transaction stops: any write
 * privilege is refused, so the login is a reader by its grants and not only by the
 * transaction mode (one layer failing, or a function we do not know, does not make the tool
 * a writer). What counts:
 *
 * - tables, views, materialized views, foreign tables: INSERT, UPDATE, DELETE, TRUNCATE,
 *   REFERENCES, TRIGGER (column grants too); sequences: USAGE, UPDATE (nextval, setval);
 * - CREATE on a schema or on the database (TEMP is not counted: temp objects end with the
 *   call's session); UPDATE on a large object (owned, or granted);
 * - EXECUTE on pg_logical_emit_message, on any SECURITY DEFINER function or procedure, on
 *   any function in an untrusted language, on dblink's functions;
 * - the role attributes CREATEDB, CREATEROLE, REPLICATION (replication slots are written
 *   outside the transaction); membership in pg_write_all_data, pg_checkpoint, pg_maintain,
 *   pg_create_subscription.
 *
 * Objects in pg_catalog, information_schema and other pg_* schemas are left out (pg_settings'
 * UPDATE for PUBLIC is set_config by another name, transactional), and so are other
 * sessions' temp tables.
 */

/** Catalog functions, granted to PUBLIC, that write outside the transaction. */
const UNTRANSACTED_FUNCTIONS = ["pg_logical_emit_message"];
/** Libraries of C functions that act outside the transaction (dblink_exec writes through another session). */
const UNTRANSACTED_LIBRARIES = ["$libdir/dblink"];
/** Predefined roles whose members may write (those of versions after the server's simply do not exist there). */
const WRITER_ROLES = ["pg_write_all_data", "pg_checkpoint", "pg_maintain", "pg_create_subscription"];

/**
 * Every write privilege the query's identities hold, one finding per object.
 * @param role the configured role, or null (the login itself)
 */
export async function writePrivileges(pool: Pool, role: string | null): Promise<WriteFinding[]> {
  const r = await pool.query<WriteFinding>(
    `
    WITH ${IDENTITIES},
     rel AS (SELECT c.oid, c.relkind, c.relacl, c.relowner, format('%I.%I', n.nspname, c.relname) AS name
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND c.relpersistence <> 't'
                AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'),
     found AS (SELECT * FROM (
       SELECT CASE WHEN rel.relkind = 'S' THEN 'sequence' ELSE 'table' END AS kind, rel.name AS object, reach.oid AS holder,
              ARRAY(SELECT p FROM unnest(CASE WHEN rel.relkind = 'S' THEN ARRAY['USAGE', 'UPDATE']
                                              ELSE ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER'] END) p
                     WHERE CASE WHEN rel.relkind = 'S' THEN has_sequence_privilege(reach.oid, rel.oid, p)
                                ELSE has_table_privilege(reach.oid, rel.oid, p)
                                     OR (p IN ('INSERT', 'UPDATE', 'REFERENCES') AND has_any_column_privilege(reach.oid, rel.oid, p)) END) AS privileges,
              coalesce(rel.relacl, acldefault(CASE WHEN rel.relkind = 'S' THEN 's' ELSE 'r' END::"char", rel.relowner))
                || coalesce((SELECT array_agg(x) FROM pg_attribute a, unnest(a.attacl) x WHERE a.attrelid = rel.oid), '{}') AS acl,
              rel.relowner AS owner, NULL::text[] AS members
         FROM rel, reach
       UNION ALL
       SELECT 'schema', quote_ident(n.nspname), reach.oid, ARRAY['CREATE'], coalesce(n.nspacl, acldefault('n', n.nspowner)), n.nspowner, NULL
         FROM pg_namespace n, reach
        WHERE n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%' AND has_schema_privilege(reach.oid, n.oid, 'CREATE')
       UNION ALL
       SELECT 'database', quote_ident(d.datname), reach.oid, ARRAY['CREATE'], coalesce(d.datacl, acldefault('d', d.datdba)), d.datdba, NULL
         FROM pg_database d, reach
        WHERE d.datname = current_database() AND has_database_privilege(reach.oid, d.oid, 'CREATE')
       UNION ALL
       SELECT 'large object', m.oid::text, reach.oid, ARRAY['UPDATE'], coalesce(m.lomacl, acldefault('L', m.lomowner)), m.lomowner, NULL
         FROM pg_largeobject_metadata m, reach
        WHERE pg_has_role(reach.oid, m.lomowner, 'USAGE')
           OR EXISTS (SELECT 1 FROM aclexplode(m.lomacl) a
                       WHERE a.privilege_type = 'UPDATE' AND (a.grantee = 0 OR pg_has_role(reach.oid, a.grantee, 'USAGE')))
       UNION ALL
       SELECT CASE WHEN p.prokind = 'p' THEN 'procedure' ELSE 'function' END,
              format('%I.%I(%s)', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid)),
              reach.oid, ARRAY['EXECUTE'], coalesce(p.proacl, acldefault('f', p.proowner)), p.proowner, NULL
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang, reach
        WHERE ((n.nspname = 'pg_catalog' AND p.proname = ANY ($2::text[]))
               OR p.prosecdef
               OR NOT (l.lanpltrusted OR l.lanname IN ('internal', 'c'))
               OR (l.lanname = 'c' AND p.probin = ANY ($3::text[])))
          AND has_function_privilege(reach.oid, p.oid, 'EXECUTE')
       UNION ALL
       SELECT 'role attribute', quote_ident(r.rolname), r.oid,
              array_remove(ARRAY[CASE WHEN r.rolcreatedb THEN 'CREATEDB' END, CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END,
                                 CASE WHEN r.rolreplication THEN 'REPLICATION' END], NULL), NULL, NULL, NULL
         FROM pg_roles r JOIN reach ON reach.oid = r.oid
        WHERE r.rolcreatedb OR r.rolcreaterole OR r.rolreplication
       UNION ALL
       SELECT 'role membership', quote_ident(g.rolname), reach.oid, ARRAY['MEMBER'], NULL, NULL,
              ARRAY(SELECT quote_ident(m.rolname) FROM pg_auth_members am JOIN pg_roles m ON m.oid = am.member
                     WHERE am.roleid = g.oid AND pg_has_role(reach.oid, am.member, 'MEMBER'))
         FROM pg_roles g, reach
        WHERE g.rolname = ANY ($4::text[]) AND pg_has_role(reach.oid, g.oid, 'MEMBER')
     ) every WHERE cardinality(every.privileges) > 0)
SELECT f.kind, f.object,
       ARRAY(SELECT DISTINCT p FROM found g, unnest(g.privileges) p WHERE g.kind = f.kind AND g.object = f.object ORDER BY 1) AS privileges,
       array_agg(DISTINCT h.rolname::text ORDER BY h.rolname::text) AS holders,
       ARRAY(SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(gr.rolname) END
               FROM found g, aclexplode(g.acl) a LEFT JOIN pg_roles gr ON gr.oid = a.grantee
              WHERE g.kind = f.kind AND g.object = f.object AND a.privilege_type = ANY (g.privileges) AND a.grantee <> g.owner
                AND (a.grantee = 0 OR pg_has_role(g.holder, a.grantee, 'USAGE'))
             UNION
             SELECT m FROM found g, unnest(g.members) m WHERE g.kind = f.kind AND g.object = f.object
              ORDER BY 1) AS grantees,
       ARRAY(SELECT DISTINCT o.rolname::text FROM found g JOIN pg_roles o ON o.oid = g.owner
              WHERE g.kind = f.kind AND g.object = f.object AND pg_has_role(g.holder, g.owner, 'USAGE') ORDER BY 1) AS owners
  FROM found f JOIN pg_roles h ON h.oid = f.holder
 GROUP BY f.kind, f.object
 ORDER BY f.kind, f.object`,
    [role, UNTRANSACTED_FUNCTIONS, UNTRANSACTED_LIBRARIES, WRITER_ROLES],
  );
  return r.rows;
}
