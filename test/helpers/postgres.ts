// A real PostgreSQL 15 for one test (test/fixtures/postgres.ts): its own cluster in a temporary directory, on a
// loopback port, stopped and removed when the test ends.
import type { Test } from 'tap';
import { startPostgresCluster, type Postgres } from '../fixtures/postgres.js';

export { postgresUnavailable, type Postgres } from '../fixtures/postgres.js';

export async function startPostgres(t: Test, options: { fsync?: boolean } = {}): Promise<Postgres> {
  const cluster = await startPostgresCluster(options);
  t.teardown(() => cluster.close());
  // A test process that dies on an uncaught error runs no teardown: the server must not outlive it.
  process.once('exit', () => cluster.closeSync());
  return cluster;
}
