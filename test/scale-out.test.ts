// Replicas that share one state in PostgreSQL (store: "postgres"): a real PostgreSQL 15 (initdb in a temporary
// directory, on a loopback port), three cloud replicas, HAProxy in front of them, all on loopback. The schema is made
// by `sovereign db migrate` and a replica refuses a schema that is not its own; a key made through the CLI works on
// every replica and through the load balancer; one revoked on one replica is refused by every other within a second
// (measured); usage counted on several replicas adds up in one billing export; with PostgreSQL down, calls get 503
// with Retry-After, /readyz says why and the load balancer stops sending calls there; they all answer again once it
// is back.
import { join } from 'node:path';
import t from 'tap';
import { KeyRegistry } from '../daemon/keys/index.js';
import { connectShared, openStore } from '../daemon/store/index.js';
import { writeReplicaConfig } from './helpers/cluster.js';
import { cli, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';
import { startHaproxy } from './helpers/haproxy.js';
import { request } from './helpers/http.js';
import { startPostgres } from './helpers/postgres.js';
import { selfSignedCert } from './helpers/tls.js';

const root = t;
const dir = tempDir(t);
const tls = selfSignedCert(dir);
const pg = await startPostgres(t);
const postgres = { url: pg.url, passwordFile: pg.passwordFile, timeoutMs: 1000 };

const configFor = (name: string) => writeReplicaConfig(dir, name, { tls, postgres });
const configs = { a: configFor('a'), b: configFor('b'), c: configFor('c') };

t.test('the schema is made by `sovereign db migrate`, and a replica refuses one that is not its own', async (t) => {
  const before = cli(['db', 'status', '--config', configs.a, '--json']);
  t.equal(before.code, 1, 'status fails before the schema exists');
  t.match(before.json, { schema: 0, ready: false, problem: /sovereign db migrate/ });
  const refused = await startDaemon(t, ['--config', configs.a]).then(
    () => null,
    (err: Error) => err.message,
  );
  t.match(refused, /no Sovereign schema yet: run 'sovereign db migrate'/, 'a replica does not start on an empty database');
  const migrated = cli(['db', 'migrate', '--config', configs.a]);
  t.equal(migrated.code, 0, migrated.stderr);
  t.match(migrated.stdout, /applying migration 1: shared state/);
  t.match(cli(['db', 'migrate', '--config', configs.b]).stdout, /already current/, 'a second migrate changes nothing');
  t.match(cli(['db', 'status', '--config', configs.b, '--json']).json, { ready: true, problem: null });

  await pg.psql(`INSERT INTO sovereign_schema (version, description) VALUES (999, 'from a newer release')`, 'sovereign');
  const newer = await startDaemon(t, ['--config', configs.a]).then(
    () => null,
    (err: Error) => err.message,
  );
  t.match(newer, /schema is version 999, newer than this build knows/, 'nor on a newer one');
  await pg.psql('DELETE FROM sovereign_schema WHERE version = 999', 'sovereign');
});

const replicas: Record<'a' | 'b' | 'c', RunningDaemon> = {} as never;
const key = { id: '', secret: '' };
const monitor = { secret: '' };
const auth = (secret: string) => ({ authorization: `Bearer ${secret}` });
const models = (base: string, secret = key.secret) => request(`${base}/models`, { headers: auth(secret), ca: tls.ca });

t.test('a key made through the CLI on one node works on every replica and through the load balancer', async (t) => {
  const project = cli(['projects', 'create', 'ministry', '--config', configs.a]);
  t.equal(project.code, 0, project.stderr);
  const made = cli(['keys', 'create', '--project', 'ministry', '--config', configs.a, '--json']);
  t.equal(made.code, 0, made.stderr);
  Object.assign(key, { id: made.json.id, secret: made.json.secret });
  // Made before any replica ran: each rebuilds its copy from PostgreSQL at start.
  // They serve the tests after this one: stopped at the file's end, not this test's.
  for (const name of ['a', 'b', 'c'] as const) replicas[name] = await startDaemon(root, ['--config', configs[name]]);
  for (const name of ['a', 'b', 'c'] as const) t.equal((await models(replicas[name].baseURL)).status, 200, `replica ${name} takes the key`);

  // Made while they run, through another node's CLI: every replica takes it at once.
  const other = cli(['keys', 'create', '--project', 'ministry', '--config', configs.c, '--json']);
  t.equal(other.code, 0, other.stderr);
  monitor.secret = other.json.secret;
  for (const name of ['a', 'b', 'c'] as const) {
    t.equal((await models(replicas[name].baseURL, monitor.secret)).status, 200, `replica ${name} takes the new key`);
  }
  t.equal(cli(['keys', 'list', '--config', configs.b, '--json']).json.length, 2, 'every node lists both keys');

  const health = await request(`${replicas.b.baseURL}/health`, { headers: auth(key.secret), ca: tls.ca });
  t.same(health.json.shared_state, { store: 'postgres', current: true, problem: null, since: null });
});

t.test('a key revoked on one replica is refused by every replica within a second', async (t) => {
  const victim = cli(['keys', 'create', '--project', 'ministry', '--config', configs.a, '--json']).json as { id: string; secret: string };
  for (const name of ['a', 'b', 'c'] as const) t.equal((await models(replicas[name].baseURL, victim.secret)).status, 200);
  // The revocation is made as a replica's dashboard makes it: through the module, committed in PostgreSQL. The
  // clock starts before the commit, so what is measured can only be longer than the true delay.
  const store = openStore(join(dir, 'revoker'));
  await connectShared(store, { store: 'postgres', postgres }, { serving: false });
  t.teardown(() => store.close());
  const started = performance.now();
  await new KeyRegistry(store).revokeKey(victim.id);
  const refusedAfter = await Promise.all(
    (['a', 'b', 'c'] as const).map(async (name) => {
      for (let i = 0; i < 300; i++) {
        const r = await models(replicas[name].baseURL, victim.secret);
        if (r.status === 401) return performance.now() - started;
        t.equal(r.status, 200, `replica ${name} answers the key until it learns of the revocation`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      return Infinity;
    }),
  );
  t.comment(`refused after ${refusedAfter.map((ms) => `${ms.toFixed(0)} ms`).join(', ')}`);
  for (const ms of refusedAfter) t.ok(ms < 1000, `refused within a second (${ms.toFixed(0)} ms)`);
  t.equal((await models(replicas.b.baseURL)).status, 200, 'other keys go on working');
});

t.test('usage counted on several replicas adds up in one billing export', async (t) => {
  // A key of its own: no call of another test is still on its way to the counts.
  const meter = cli(['keys', 'create', '--project', 'ministry', '--config', configs.a, '--json']).json as { id: string; secret: string };
  const calls = { a: 5, b: 7, c: 3 };
  for (const [name, n] of Object.entries(calls) as Array<['a' | 'b' | 'c', number]>) {
    for (let i = 0; i < n; i++) t.equal((await models(replicas[name].baseURL, meter.secret)).status, 200);
  }
  // Each replica adds its counts every few seconds.
  let counted = 0;
  for (const until = Date.now() + 20_000; Date.now() < until && counted < 15;) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    counted = billed(meter.id);
  }
  t.equal(counted, 15, 'the calls of all three replicas are billed to the key once each');
  await new Promise((resolve) => setTimeout(resolve, 6000));
  t.equal(billed(meter.id), 15, 'and no more once every replica has added its counts again');
});

/** The key's /v1/models calls today, as `sovereign usage export` reads them from PostgreSQL. */
function billed(keyId: string): number {
  const r = cli(['usage', 'export', '--config', configs.b, '--format', 'jsonl']);
  if (r.code !== 0) throw new Error(r.stderr);
  return r.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { key: string; endpoint: string; requests: number })
    .filter((row) => row.key === keyId && row.endpoint === '/v1/models')
    .reduce((sum, row) => sum + row.requests, 0);
}

t.test('a document uploaded through one replica is found through the others within two seconds', async (t) => {
  const call = (base: string, method: string, path: string, body?: unknown) =>
    request(`${base}${path}`, {
      method,
      headers: { ...auth(key.secret), ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
      ca: tls.ca,
    });
  const query = { knowledge_base: 'circulars', query: 'قرار تمديد ساعات عمل الفروع في رمضان', top_k: 3 };
  // Built first on B and C, so what follows is an update of their live indexes, not a build from their copies.
  for (const name of ['b', 'c'] as const) t.equal((await call(replicas[name].baseURL, 'POST', '/documents/query', query)).status, 404);
  const made = await call(replicas.a.baseURL, 'POST', '/documents', {
    knowledge_base: 'circulars',
    filename: 'ramadan-hours.md',
    content: 'تعميم: قرار تمديد ساعات عمل الفروع في رمضان حتى العاشرة مساءً. Branch hours are extended in Ramadan until 10 pm.',
  });
  t.equal(made.status, 201, made.text);
  const uploaded = performance.now();
  const id = made.json.id as string;
  t.equal((await call(replicas.b.baseURL, 'GET', `/documents/${id}`)).status, 200, 'B knows the document as soon as A answered');
  for (const name of ['b', 'c'] as const) {
    let hits: Array<{ document_id: string }> = [];
    for (let i = 0; i < 100 && !hits.some((h) => h.document_id === id); i++) {
      const r = await call(replicas[name].baseURL, 'POST', '/documents/query', query);
      hits = r.status === 200 ? (r.json.citations as typeof hits) : [];
      if (!hits.length) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const ms = performance.now() - uploaded;
    t.ok(
      hits.some((h) => h.document_id === id),
      `replica ${name} finds it (${ms.toFixed(0)} ms after the upload)`,
    );
    t.ok(ms < 2000, 'within two seconds');
  }

  t.equal((await call(replicas.c.baseURL, 'DELETE', `/documents/${id}`)).status, 200, 'deleted through C');
  let gone = false;
  for (let i = 0; i < 100 && !gone; i++) {
    const r = await call(replicas.a.baseURL, 'POST', '/documents/query', query);
    // The knowledge base is empty now: 404 once A knows.
    gone =
      r.status === 404 || (r.status === 200 && !(r.json.citations as Array<{ document_id: string }>).some((h) => h.document_id === id));
    if (!gone) await new Promise((resolve) => setTimeout(resolve, 20));
  }
  t.ok(gone, 'A no longer cites it');
  t.equal((await call(replicas.b.baseURL, 'GET', `/documents/${id}`)).status, 404);
});

t.test('with PostgreSQL down, replicas refuse calls with 503 and say why, and serve again once it is back', async (t) => {
  const lb = await startHaproxy(
    t,
    (['a', 'b', 'c'] as const).map((name) => ({ host: '127.0.0.1', port: Number(new URL(replicas[name].origin).port), name })),
    { tls: true, healthPath: '/readyz' },
  );
  const through = `http://127.0.0.1:${lb.port}/v1`;
  for (let i = 0; i < 6; i++) t.equal((await models(through)).status, 200, 'the load balancer spreads calls over the replicas');

  await pg.stop();
  const stoppedAt = performance.now();
  let refused = await models(replicas.a.baseURL);
  while (refused.status === 200 && performance.now() - stoppedAt < 5000) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    refused = await models(replicas.a.baseURL);
  }
  t.equal(refused.status, 503, 'a call is refused once the copy can no longer be trusted');
  t.ok(performance.now() - stoppedAt < 2000, 'within the revocation bound and a poll');
  t.equal(refused.json.error.code, 'shared_state_unavailable');
  t.match(refused.headers['retry-after'], /^\d+$/);
  t.match(refused.json.error.message, /cannot reach the database the replicas share/);
  // Each replica's copy goes stale on its own clock (its last confirmation), within a poll of the others'.
  let ready = await request(`${replicas.b.origin}/readyz`, { ca: tls.ca });
  for (const until = Date.now() + 2000; ready.status === 200 && Date.now() < until;) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    ready = await request(`${replicas.b.origin}/readyz`, { ca: tls.ca });
  }
  t.equal(ready.status, 503);
  t.match(ready.json, { status: 'unavailable', problem: /PostgreSQL does not answer/ });
  const made = cli(['keys', 'create', '--project', 'ministry', '--config', configs.a]);
  t.equal(made.code, 1, 'the CLI cannot change keys either');
  t.match(made.stderr, /cannot reach PostgreSQL/);
  t.equal((await models(through)).status, 503, 'the load balancer has no replica to send the call to');

  await pg.start();
  let back = await models(replicas.a.baseURL);
  for (const until = Date.now() + 10_000; back.status !== 200 && Date.now() < until;) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    back = await models(replicas.a.baseURL);
  }
  t.equal(back.status, 200, 'calls are answered again once PostgreSQL is');
  let readyAgain = await request(`${replicas.c.origin}/readyz`, { ca: tls.ca });
  for (const until = Date.now() + 5000; readyAgain.status !== 200 && Date.now() < until;) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    readyAgain = await request(`${replicas.c.origin}/readyz`, { ca: tls.ca });
  }
  t.equal(readyAgain.status, 200, 'every replica is ready again');
  let viaLb = await models(through);
  for (const until = Date.now() + 10_000; viaLb.status !== 200 && Date.now() < until;) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    viaLb = await models(through);
  }
  t.equal(viaLb.status, 200, 'and through the load balancer');
});
