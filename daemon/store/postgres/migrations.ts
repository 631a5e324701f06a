// The PostgreSQL schema, versioned. Each migration runs once, in order, in its own transaction, by `sovereign db
// migrate` (never by a replica starting: a fleet upgrading one node at a time must not race to change the schema).
// A replica refuses to start on a schema older or newer than the newest version below.
import type { Pool, PoolClient } from 'pg';

export interface Migration {
  version: number;
  description: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'shared state: one row per record, numbered by the commit that wrote it',
    sql: `
      -- Every record of the shared state: its named database (space), its key (JSON of the lmdb key), its value
      -- (msgpack; NULL once removed, kept so that replicas catching up learn of the removal), the number of the
      -- change that last wrote it, and the process that made that change (a replica tells its own changes from
      -- others', which its in-memory indexes must learn of). Replicas copy the rows whose seq is above what they hold.
      CREATE TABLE state (
        space text NOT NULL,
        key text NOT NULL,
        value bytea,
        seq bigint NOT NULL,
        writer text NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (space, key)
      );
      CREATE INDEX state_by_seq ON state (seq);
      -- Removed records are kept for a while (TOMBSTONE_HOURS), then purged; the highest change number purged is
      -- kept, so a copy older than it knows it may hold a removed record and is rebuilt.
      CREATE INDEX state_tombstones ON state (written_at) WHERE value IS NULL;
      CREATE TABLE state_purged (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), seq bigint NOT NULL);
      INSERT INTO state_purged (seq) VALUES (0);
      -- The number of the last change. Every commit locks this one row first, so commits are numbered in the order
      -- they become visible, and a replica that has copied up to N has every change numbered N or less.
      CREATE TABLE state_head (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), seq bigint NOT NULL);
      INSERT INTO state_head (seq) VALUES (0);
    `,
  },
];

export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/** Arbitrary but fixed: the advisory lock `db migrate` holds, so two of them never interleave. */
const MIGRATE_LOCK = 7_304_611_951;

/** The schema version the database holds: 0 when it has none yet. */
export async function schemaVersion(db: Pool | PoolClient): Promise<number> {
  const exists = await db.query<{ present: boolean }>(`SELECT to_regclass('sovereign_schema') IS NOT NULL AS present`);
  if (!exists.rows[0]?.present) return 0;
  const { rows } = await db.query<{ version: number | null }>('SELECT max(version) AS version FROM sovereign_schema');
  return rows[0]?.version ?? 0;
}

/** Why a replica of this build cannot use a database at `version`, or null when it can. */
export function schemaProblem(version: number): string | null {
  if (version === SCHEMA_VERSION) return null;
  if (version === 0) return "the database has no Sovereign schema yet: run 'sovereign db migrate' once, from any node";
  if (version < SCHEMA_VERSION) {
    return `the database's schema is version ${version}, older than this build's ${SCHEMA_VERSION}: run 'sovereign db migrate' once, from a node with this build`;
  }
  return `the database's schema is version ${version}, newer than this build knows (${SCHEMA_VERSION}): upgrade this node's software to the release that migrated it`;
}

/** Applies the migrations the database lacks, in order; `progress` hears of each. Returns the versions applied. */
export async function migrate(pool: Pool, progress: (line: string) => void = () => {}): Promise<number[]> {
  const client = await pool.connect();
  const applied: number[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATE_LOCK]);
    await client.query(
      `CREATE TABLE IF NOT EXISTS sovereign_schema (
         version integer PRIMARY KEY, description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    const current = await schemaVersion(client);
    if (current > SCHEMA_VERSION) throw new Error(schemaProblem(current)!);
    for (const migration of MIGRATIONS) {
      if (migration.version <= current) continue;
      progress(`applying migration ${migration.version}: ${migration.description}`);
      await client.query('BEGIN');
      try {
        await client.query(migration.sql);
        await client.query('INSERT INTO sovereign_schema (version, description) VALUES ($1, $2)', [
          migration.version,
          migration.description,
        ]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${migration.version} failed and was rolled back: ${(err as Error).message}`);
      }
      applied.push(migration.version);
    }
    return applied;
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATE_LOCK]).catch(() => {});
    client.release();
  }
}
