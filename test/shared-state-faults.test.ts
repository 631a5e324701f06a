// The shared state in PostgreSQL (daemon/store/postgres/state.ts) under faults, on the store itself (no daemon): a
// commit whose outcome is unknown to the replica (its COMMIT was sent, the answer never came) must not make usage
// counted twice; changes queued together must not fail together because of their size.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { unpack } from 'msgpackr';
import t, { type Test } from 'tap';
import { DocumentLibrary } from '../daemon/documents/index.js';
import { noRedactions } from '../daemon/scrub/index.js';
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

t.test('a copy over an hour old that a purge overtakes while it catches up is copied again, not left with a removed record', async (t) => {
  const writer = await replica(t, 10_000);
  // As the CLI's copy is (it follows no daemon): brought up to date when it starts and after its changes.
  const cli = openStore(tempDir(t));
  await connectShared(cli, { store: 'postgres', postgres: { ...options, timeoutMs: 10_000 } }, { serving: false });
  t.teardown(() => cli.close());
  const token = 'session-to-end';
  await writer.update((tx) => tx.put('sessions', token, { userId: 'user_1', expiresAt: Date.now() + 3_600_000 }));
  await cli.refresh();
  t.ok(cli.db('sessions').get(token), 'the copy holds the session');

  // Then, while the copy is not brought up to date: more than a page of changes, and the session ended, an hour ago.
  for (let i = 0; i < 3; i++) {
    await writer.update((tx) => {
      for (let j = 0; j < 1000; j++) tx.put('key-last-used', `filler-${i}-${j}`, j);
    });
  }
  await writer.update((tx) => tx.remove('sessions', token));
  await postgres.psql(
    `UPDATE state SET written_at = now() - interval '2 hours' WHERE space = 'sessions' AND key = '${JSON.stringify(token)}'`,
    'sovereign',
  );
  // A replica purges removed records (as PostgresState.purge does) just after the copy took its first page.
  let purged = false;
  cli.onChange('key-last-used', () => {
    if (purged) return;
    purged = true;
    execFileSync(
      '/usr/lib/postgresql/15/bin/psql',
      ['-X', '-q', '-h', '127.0.0.1', '-p', String(postgres.port), '-U', 'sovereign', '-d', 'sovereign'],
      {
        input: `WITH gone AS (DELETE FROM state WHERE value IS NULL AND written_at < now() - make_interval(hours => 1) RETURNING seq)
              UPDATE state_purged SET seq = GREATEST(seq, (SELECT coalesce(max(seq), 0) FROM gone));`,
        env: { ...process.env, PGPASSWORD: readFileSync(postgres.passwordFile, 'utf8').trim() },
      },
    );
  });
  await cli.refresh();
  t.ok(purged, 'the purge ran while the copy caught up');
  t.equal(cli.db('sessions').get(token), undefined, 'the ended session is gone from the copy');
  t.equal(cli.db('key-last-used').get('filler-2-999'), 999, 'and the copy holds every change');
});

t.test('a replica that starts when the newest changes are removals since purged is ready, and stays so', async (t) => {
  const writer = await replica(t);
  await writer.update((tx) => tx.put('sessions', 'quiet-night', { userId: 'user_1', expiresAt: Date.now() }));
  // The last changes the cluster made, an hour ago: expired sessions swept.
  await writer.update((tx) => tx.remove('sessions', 'quiet-night'));
  await postgres.psql(
    `UPDATE state SET written_at = now() - interval '2 hours' WHERE value IS NULL;
     WITH gone AS (DELETE FROM state WHERE value IS NULL AND written_at < now() - make_interval(hours => 1) RETURNING seq)
     UPDATE state_purged SET seq = GREATEST(seq, (SELECT coalesce(max(seq), 0) FROM gone));`,
    'sovereign',
  );
  t.equal(
    await postgres.psql('SELECT (SELECT seq FROM state_head) = (SELECT seq FROM state_purged)', 'sovereign'),
    't\n',
    'the head is a purged removal',
  );
  const started = await replica(t, 5_000);
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  t.equal(started.shared!.staleness(), null, 'the replica trusts its copy');
  // And the CLI beside it waits for nothing it cannot have.
  const cli = openStore(dirname(started.path));
  await connectShared(cli, { store: 'postgres', postgres: options }, { serving: false, daemonRunning: true });
  await cli.refresh();
  await cli.close();
});

t.test('a replica cut off from PostgreSQL refuses within a second though its wall clock is set back', async (t) => {
  const store = await replica(t, 400);
  t.equal(store.shared!.staleness(), null, 'current while PostgreSQL answers');
  await postgres.stop({ immediate: true });
  const realNow = Date.now;
  try {
    await new Promise((resolve) => setTimeout(resolve, 1_300));
    // NTP steps the clock back (a virtual machine resumed, a wrong time corrected).
    Date.now = () => realNow() - 60_000;
    t.throws(() => store.shared!.assertFresh(), { name: 'SharedStateUnavailable' }, 'authentication is refused');
    t.not(store.shared!.staleness(), null, 'health says why');
  } finally {
    Date.now = realNow;
    await postgres.start();
  }
});

t.test(
  'a replica whose PostgreSQL went back in time (restored, or failed over to a standby behind it) stops trusting its copy',
  async (t) => {
    const store = await replica(t, 2_000);
    const writer = await replica(t, 2_000);
    await writer.update((tx) => tx.put('sessions', 'before-restore', { userId: 'user_1', expiresAt: Date.now() + 3_600_000 }));
    const head = Number(await postgres.psql('SELECT seq FROM state_head', 'sovereign'));
    for (let i = 0; i < 3; i++) await writer.update((tx) => tx.put('sessions', `lost-${i}`, { userId: 'user_1', expiresAt: 0 }));
    await store.refresh();
    // The database as a backup taken before the last three changes holds it: the numbers they had will be given again,
    // to other changes (a key revoked, say), which a copy that holds the lost ones would never take in.
    await postgres.psql(`DELETE FROM state WHERE seq > ${head}; UPDATE state_head SET seq = ${head};`, 'sovereign');
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    t.throws(() => store.shared!.assertFresh(), { name: 'SharedStateUnavailable' }, 'the replica authenticates no call');
    t.match(store.shared!.staleness()?.problem, /restart/, 'and says to restart it');
    // Nor once new changes take the head past what the copy held.
    for (let i = 0; i < 5; i++) await writer.update((tx) => tx.put('sessions', `after-${i}`, { userId: 'user_1', expiresAt: 0 }));
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    t.throws(() => store.shared!.assertFresh(), { name: 'SharedStateUnavailable' }, 'it stays so until restarted');
  },
);

t.test('documents added at once through two replicas are all stored, with chunk ids none shares', async (t) => {
  const libraries = await Promise.all(
    [0, 1].map(async () => {
      const store = await replica(t, 5_000);
      const library = new DocumentLibrary(store, {
        chunksPerDocument: 1000,
        documentsPerKnowledgeBase: 10_000,
        vectorsDir: join(tempDir(t), 'vectors'),
        log: { info: () => {}, warn: () => {} },
      });
      await library.open();
      t.teardown(() => library.close());
      return library;
    }),
  );
  // As clients uploading folders, 100 requests at once on each replica: each change takes the next chunk ids, one
  // record they all read and write.
  const results = await Promise.allSettled(
    Array.from({ length: 200 }, (_, i) =>
      libraries[i % 2].add('p1', {
        knowledgeBase: 'kb',
        content: `Document ${i} about the branch office.`,
        filename: null,
        metadata: null,
        redactions: noRedactions(),
      }),
    ),
  );
  const failed = results.filter((r) => r.status === 'rejected');
  t.equal(failed.length, 0, `every document stored (${failed.length} not: ${(failed[0] as PromiseRejectedResult | undefined)?.reason})`);
  const chunkIds = results.flatMap((r) => (r.status === 'fulfilled' ? r.value.chunkIds : []));
  t.equal(new Set(chunkIds).size, chunkIds.length, 'no chunk id taken twice');
});

t.test('changes queued together are committed whatever their size together', async (t) => {
  const store = await replica(t, 30_000);
  // As uploads of large files write them: lines some megabytes at a time, through many uploads at once.
  const line = 'x'.repeat(4 << 20);
  const results = await Promise.allSettled(
    Array.from({ length: 72 }, (_, i) => store.update((tx) => tx.put('file-lines', [`file-big-${i}`, 0], line))),
  );
  const failed = results.filter((r) => r.status === 'rejected');
  t.equal(failed.length, 0, `every change committed (${(failed[0] as PromiseRejectedResult | undefined)?.reason})`);
  t.equal(await postgres.psql(`SELECT count(*) FROM state WHERE space = 'file-lines' AND key LIKE '["file-big-%'`, 'sovereign'), '72\n');
  // A copy reads them back from PostgreSQL, some at a time.
  await store.refresh();
  t.equal(store.db<string, [string, number]>('file-lines').get(['file-big-71', 0])?.length, line.length, 'the copy holds them');
});
