// Limits shared by replicas (limits.store = "redis"): a real redis-server (Debian's, started here on a loopback port,
// no persistence), two cloud daemons holding the same key, and calls fired at both at once. The key's limit holds
// exactly across them: as many calls admitted as the limit, every admitted one with its own remaining count, the
// rest refused with 429 and Retry-After. Token reservations and settling through Redis, through the module. With
// Redis gone, nothing is admitted (503) and health says why; it comes back when Redis does.
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { ApiError } from '../daemon/errors/index.js';
import { KeyLimits, RedisLimitStore } from '../daemon/limits/index.js';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

const redisPort = await freePort();
let redis: ChildProcess | null = null;
async function startRedis(): Promise<void> {
  redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  for (const until = Date.now() + 10_000; Date.now() < until;) {
    const up = await new Promise<boolean>((resolve) => {
      const s = net.connect(redisPort, '127.0.0.1', () => (s.destroy(), resolve(true)));
      s.on('error', () => resolve(false));
    });
    if (up) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('redis-server did not start');
}
async function stopRedis(): Promise<void> {
  const proc = redis;
  redis = null;
  if (!proc || proc.exitCode !== null) return;
  const exited = new Promise((resolve) => proc.once('exit', resolve));
  proc.kill('SIGTERM');
  await exited;
}
await startRedis();
t.teardown(stopRedis);
const redisUrl = `redis://127.0.0.1:${redisPort}/0`;

const dir = tempDir(t);
const tls = selfSignedCert(dir);
const LIMIT = 40;
const configFor = (name: string) => {
  const file = join(dir, `${name}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      posture: 'cloud',
      region: 'sa-riyadh-1',
      listen: { host: '127.0.0.1', port: 0 },
      tls: { cert: tls.cert, key: tls.key },
      dataDir: join(dir, name),
      limits: { store: 'redis', redis: { url: redisUrl, keyPrefix: 'replicas-test:', timeoutMs: 500 } },
    }),
  );
  return file;
};
// Both replicas hold the same key: the second's data directory starts as a copy of the first's.
const key = createKey(join(dir, 'a'), 'acme', ['--rpm', String(LIMIT)]);
// Health is an authenticated call like any other: it is read with a key of its own, whose limit the test never nears.
const monitor = createKey(join(dir, 'a'), 'ops', ['--rpm', '100000']);
cpSync(join(dir, 'a'), join(dir, 'b'), { recursive: true });
const replicaA = await startDaemon(t, ['--config', configFor('a')]);
const replicaB = await startDaemon(t, ['--config', configFor('b')]);
const auth = { authorization: `Bearer ${key.secret}` };
const get = (base: string, path = '/models') => request(`${base}${path}`, { headers: auth, ca: tls.ca });
const health = async (base: string) =>
  (await request(`${base}/health`, { headers: { authorization: `Bearer ${monitor.secret}` }, ca: tls.ca })).json;

t.test('two replicas hold one key to its limit exactly under concurrent calls', async (t) => {
  const calls = Array.from({ length: LIMIT * 3 }, (_, i) => get(i % 2 ? replicaA.baseURL : replicaB.baseURL));
  const answers = await Promise.all(calls);
  const admitted = answers.filter((a) => a.status === 200);
  const refused = answers.filter((a) => a.status === 429);
  t.equal(admitted.length, LIMIT, `exactly ${LIMIT} admitted of ${calls.length}`);
  t.equal(refused.length, calls.length - LIMIT, 'every other call refused');
  const remaining = admitted.map((a) => Number(a.headers['x-ratelimit-remaining-requests'])).sort((x, y) => x - y);
  t.same(
    remaining,
    Array.from({ length: LIMIT }, (_, i) => i),
    'each admitted call saw its own place in the one shared bucket',
  );
  for (const r of refused.slice(0, 3)) {
    t.equal(r.json.error.code, 'rate_limit_exceeded');
    t.match(r.headers['retry-after'], /^\d+$/);
    t.equal(r.headers['x-ratelimit-limit-requests'], String(LIMIT));
  }
  const fromA = answers.filter((a, i) => i % 2 === 1);
  t.ok(
    fromA.some((a) => a.status === 200) && answers.filter((a, i) => i % 2 === 0).some((a) => a.status === 200),
    'both replicas admitted calls',
  );
  t.same((await health(replicaA.baseURL)).limiter, { store: 'redis', problem: null });
});

t.test('token reservations and settling go through Redis too', async (t) => {
  const log = { info: () => {}, warn: () => {} };
  const one = new RedisLimitStore({ url: redisUrl, keyPrefix: 'tokens-test:', timeoutMs: 500 }, log);
  const two = new RedisLimitStore({ url: redisUrl, keyPrefix: 'tokens-test:', timeoutMs: 500 }, log);
  await one.start();
  await two.start();
  t.teardown(async () => {
    await one.close();
    await two.close();
  });
  const first = new KeyLimits(one);
  const second = new KeyLimits(two);
  const quota = { keyId: 'key_tokens', rpm: 100, tpm: 1000 };
  t.equal((await first.reserveTokens(quota, 600))['x-ratelimit-remaining-tokens'], '400');
  const refused = await Promise.resolve(second.reserveTokens(quota, 600)).catch((e: unknown) => e);
  t.ok(refused instanceof ApiError && refused.status === 429, 'the other replica sees the reservation');
  first.settleTokens(quota, 600, 100);
  await new Promise((resolve) => setTimeout(resolve, 100));
  const after = await second.reserveTokens(quota, 500);
  t.ok(Number(after['x-ratelimit-remaining-tokens']) >= 399, 'unused tokens came back for both replicas');
  const tooBig = await Promise.resolve(first.reserveTokens(quota, 5000)).catch((e: unknown) => e);
  t.match((tooBig as ApiError).message, /more than the 1000 tokens per minute/);
});

t.test("a project's limit holds across its keys and the replicas", async (t) => {
  const log = { info: () => {}, warn: () => {} };
  const stores = [0, 1].map(() => new RedisLimitStore({ url: redisUrl, keyPrefix: 'projects-test:', timeoutMs: 500 }, log));
  for (const store of stores) await store.start();
  t.teardown(async () => {
    for (const store of stores) await store.close();
  });
  const replicas = stores.map((store) => new KeyLimits(store));
  const project = { id: 'proj_shared', rpm: 3, tpm: 100_000 };
  const keys = ['key_one', 'key_two', 'key_three'].map((keyId) => ({ keyId, rpm: 100, tpm: 100_000, project }));
  const answers = await Promise.all(
    Array.from({ length: 9 }, (_, i) =>
      Promise.resolve()
        .then(() => replicas[i % 2].admitRequest(keys[i % 3]))
        .catch((err: unknown) => err),
    ),
  );
  const refused = answers.filter((a) => a instanceof ApiError);
  t.equal(answers.length - refused.length, 3, 'three calls admitted between three keys on two replicas');
  t.match(refused[0].message, /project proj_shared: 3 requests per minute, shared by all its keys/);
  t.equal(refused[0].headers['x-ratelimit-limit-requests'], '3');
  const own = await replicas[0].admitRequest({ keyId: 'key_other', rpm: 100, tpm: 100_000, project: { ...project, id: 'proj_other' } });
  t.equal(own['x-ratelimit-remaining-requests'], '2', "another project's key draws on its own project's limit");
});

t.test('with Redis gone nothing is admitted, health says why, and calls resume when it is back', async (t) => {
  await stopRedis();
  const refused = await get(replicaA.baseURL);
  t.equal(refused.status, 503);
  t.equal(refused.json.error.code, 'server_overloaded');
  t.match(refused.json.error.message, /the shared rate limiter does not answer/);
  t.equal(refused.headers['retry-after'], '1');
  // The other replica, which has made no call since, knows it too (its connection closed).
  let report = await health(replicaB.baseURL);
  for (const until = Date.now() + 3000; report.status !== 'degraded' && Date.now() < until;) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    report = await health(replicaB.baseURL);
  }
  t.equal(report.status, 'degraded');
  t.match(report.limiter.problem, /the shared rate limiter \(Redis\) is not reachable/);

  await startRedis();
  let status = 0;
  for (const until = Date.now() + 15_000; status !== 200 && Date.now() < until;) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    status = (await get(replicaA.baseURL)).status;
  }
  t.equal(status, 200, 'admitted again once Redis answers (a fresh Redis: the bucket starts full)');
  t.equal((await health(replicaB.baseURL)).limiter.problem, null);
});
