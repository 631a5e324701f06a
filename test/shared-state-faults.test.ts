// The shared state in PostgreSQL (daemon/store/postgres/state.ts) under faults, on the store itself (no daemon): a
// commit whose outcome is unknown to the replica (its COMMIT was sent, the answer never came) must not make usage
// counted twice; changes queued together must not fail together because of their size.
import pg from 'pg';
import { unpack } from 'msgpackr';
import t, { type Test } from 'tap';
import { connectionConfig, connectShared, migrate, openStore, type Store } from '../daemon/store/index.js';
import { UsageMeter } from '../daemon/usage/index.js';
import { tempDir } from './helpers/daemon.js';
import { startPostgres } from './helpers/postgres.js';

const postgres = await startPostgres(t);
const options = { url: postgres.url, passwordFile: postgres.passwordFile, timeoutMs: 400 };
{
  const pool = new pg.Pool({ ...connectionConfig(options, 'test'), max: 1 });
  await migrate(pool);
  await pool.end();
}

async function replica(t: Test, timeoutMs = options.timeoutMs): Promise<Store> {
  const store = openStore(tempDir(t));
  await connectShared(store, { store: 'postgres', postgres: { ...options, timeoutMs } }, { serving: true });
  t.teardown(() => store.close());
  return store;
}

/** The record as PostgreSQL holds it (msgpack), undefined when absent. */
async function stored(space: string, key: unknown): Promise<unknown> {
  const out = await postgres.psql(
    `SELECT encode(value, 'hex') FROM state WHERE space = '${space}' AND key = '${JSON.stringify(key).replace(/'/g, "''")}'`,
    'sovereign',
  );
  return out.trim() ? unpack(Buffer.from(out.trim(), 'hex')) : undefined;
}

/**
 * Makes the next commit of the shared state slow at COMMIT (a deferred trigger sleeps there): the replica's statement
 * times out (postgres.timeoutMs) while PostgreSQL goes on and commits it.
 */
async function slowNextCommit(ms: number): Promise<void> {
  await postgres.psql(
    `CREATE TABLE IF NOT EXISTS slow_once (ms int);
     INSERT INTO slow_once VALUES (${ms});
     CREATE OR REPLACE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
       DECLARE wait int;
       BEGIN
         DELETE FROM slow_once RETURNING ms INTO wait;
         IF wait IS NOT NULL THEN PERFORM pg_sleep(wait / 1000.0); END IF;
         RETURN NULL;
       END $$;
     DROP TRIGGER IF EXISTS slow_commit ON state;
     CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT OR UPDATE ON state DEFERRABLE INITIALLY DEFERRED
       FOR EACH ROW EXECUTE FUNCTION slow_commit();`,
    'sovereign',
  );
}

async function dropSlowCommit(): Promise<void> {
  await postgres.psql('DROP TRIGGER IF EXISTS slow_commit ON state; DELETE FROM slow_once;', 'sovereign');
}

t.test('usage whose commit timed out but went through is not counted again', async (t) => {
  const store = await replica(t);
  const errors: Error[] = [];
  const usage = new UsageMeter(store, (err) => errors.push(err));
  const minute = Math.floor(Date.now() / 60_000);
  const at = minute * 60_000 + 1_000;
  for (let i = 0; i < 7; i++) usage.record('key_ambiguous', '/v1/chat/completions', 200, at);

  await slowNextCommit(1_500);
  t.teardown(dropSlowCommit);
  await usage.flush();
  t.match(errors, [{ name: 'SharedStateUnavailable' }], `the flush saw its commit fail (${errors[0]?.message})`);
  // PostgreSQL finished the commit meanwhile.
  await new Promise((resolve) => setTimeout(resolve, 1_800));
  await dropSlowCommit();
  await usage.flush();
  await usage.close();

  const id = `${String(minute).padStart(10, '0')}|key_ambiguous|/v1/chat/completions`;
  t.match(await stored('usage', id), { calls: 7 }, 'the minute holds each call once');
  const day = Math.floor(at / 86_400_000);
  t.match(
    await stored('usage-daily', `${String(day).padStart(10, '0')}|key_ambiguous|/v1/chat/completions`),
    { calls: 7 },
    'so does the day',
  );
});

t.test('usage whose commit failed before it reached PostgreSQL is added once it answers again', async (t) => {
  const store = await replica(t);
  const errors: Error[] = [];
  const usage = new UsageMeter(store, (err) => errors.push(err));
  const minute = Math.floor(Date.now() / 60_000);
  const at = minute * 60_000 + 2_000;
  for (let i = 0; i < 5; i++) usage.record('key_down', '/v1/embeddings', 200, at);
  await postgres.stop({ immediate: true });
  try {
    await usage.flush();
    usage.record('key_down', '/v1/embeddings', 500, at);
    await usage.flush();
  } finally {
    await postgres.start();
  }
  t.ok(errors.length >= 2, 'both flushes failed while PostgreSQL was down');
  await usage.close();
  const id = `${String(minute).padStart(10, '0')}|key_down|/v1/embeddings`;
  t.match(await stored('usage', id), { calls: 6, errors: 1 }, 'every call counted once');
});

t.test('changes queued together are committed whatever their size together', async (t) => {
  const store = await replica(t, 10_000);
  // As uploads of large files write them: lines some megabytes at a time, through many uploads at once.
  const line = 'x'.repeat(4 << 20);
  const results = await Promise.allSettled(
    Array.from({ length: 72 }, (_, i) => store.update((tx) => tx.put('file-lines', [`file-big-${i}`, 0], line))),
  );
  const failed = results.filter((r) => r.status === 'rejected');
  t.equal(failed.length, 0, `every change committed (${(failed[0] as PromiseRejectedResult | undefined)?.reason})`);
  t.equal(await postgres.psql(`SELECT count(*) FROM state WHERE space = 'file-lines' AND key LIKE '["file-big-%'`, 'sovereign'), '72\n');
  // Another replica copies them all, some at a time.
  const other = await replica(t, 10_000);
  t.equal(other.db<string, [string, number]>('file-lines').get(['file-big-71', 0])?.length, line.length, 'another replica holds them');
});
