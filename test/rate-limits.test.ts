// Per-key limits on the metered postures (cloud, frontier): exact under concurrency, OpenAI's headers, and
// nothing of the kind on the sealed postures.
import t from 'tap';
import { KeyLimits, formatDuration } from '../daemon/limits/index.js';
import { ApiError } from '../daemon/errors/index.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const dataDir = tempDir(t);
const tls = selfSignedCert(dataDir);
const tlsEnv = { SOVEREIGN_TLS_CERT: tls.cert, SOVEREIGN_TLS_KEY: tls.key };

t.test('cloud: 50 concurrent calls against 10 rpm admit exactly 10', async (t) => {
  const key = createKey(dataDir, 'bank', ['--rpm', '10']);
  const other = createKey(dataDir, 'bank', ['--rpm', '10']);
  const daemon = await startDaemon(
    t,
    ['--posture', 'cloud', '--host', '127.0.0.1', '--data-dir', dataDir, '--region', 'sa-riyadh-1'],
    tlsEnv,
  );
  t.match(daemon.baseURL, /^https:/, 'cloud serves HTTPS');
  const call = (secret: string) => request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` }, ca: tls.ca });

  const results = await Promise.all(Array.from({ length: 50 }, () => call(key.secret)));
  const ok = results.filter((r) => r.status === 200);
  const limited = results.filter((r) => r.status === 429);
  t.equal(ok.length, 10, 'exactly the limit succeeds');
  t.equal(limited.length, 40, 'every other call is refused');

  t.same(
    ok.map((r) => Number(r.headers['x-ratelimit-remaining-requests'])).sort((a, b) => a - b),
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    'each success reports what remains',
  );
  for (const r of ok) {
    t.equal(r.headers['x-ratelimit-limit-requests'], '10');
    t.match(String(r.headers['x-ratelimit-reset-requests']), /^(\d+ms|[\d.]+s|\d+m[\d.]+s)$/);
    t.ok(r.headers['x-ratelimit-limit-tokens'], 'token limit header on success');
    t.ok(r.headers['x-ratelimit-remaining-tokens']);
    t.ok(r.headers['x-ratelimit-reset-tokens']);
  }
  const r = limited[0];
  t.equal(r.json.error.code, 'rate_limit_exceeded');
  t.equal(r.json.error.type, 'requests');
  t.match(r.headers['retry-after'], /^[1-9]\d*$/, 'Retry-After in whole seconds');
  t.ok(Number(r.headers['retry-after']) <= 6, 'one request frees up every 6 s at 10 rpm');
  t.equal(r.headers['x-ratelimit-limit-requests'], '10');
  t.equal(r.headers['x-ratelimit-remaining-requests'], '0');
  for (const h of ['x-region', 'x-request-id', 'x-sovereign', 'x-ratelimit-reset-requests', 'x-ratelimit-limit-tokens'])
    t.ok(r.headers[h], `${h} on 429`);

  t.equal((await call(other.secret)).status, 200, "another key's limit is its own");

  t.equal(cli(['keys', 'limits', key.id, '--rpm', '100000', '--data-dir', dataDir]).code, 0);
  let status = 429;
  for (let i = 0; i < 20 && status !== 200; i++) {
    status = (await call(key.secret)).status;
    if (status !== 200) await new Promise((res) => setTimeout(res, 50));
  }
  t.equal(status, 200, 'a raised limit applies on the running daemon');
});

t.test('frontier says it is not sovereign on every response', async (t) => {
  const key = createKey(dataDir, 'frontier-co');
  const daemon = await startDaemon(t, ['--posture', 'frontier', '--host', '127.0.0.1', '--data-dir', dataDir], tlsEnv);
  for (const [path, headers] of [
    ['/v1/models', { authorization: `Bearer ${key.secret}` }],
    ['/v1/models', {}],
    ['/v1/nope', {}],
    ['/healthz', {}],
  ] as const) {
    const r = await request(`${daemon.origin}${path}`, { headers, ca: tls.ca });
    t.equal(r.headers['x-sovereign'], 'false', `${path} ${r.status}`);
  }
  const health = await request(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` }, ca: tls.ca });
  t.match(health.json, { posture: 'frontier', sovereign: false });
});

t.test('device posture does not meter', async (t) => {
  const key = createKey(dataDir, 'device-co', ['--rpm', '1']);
  const daemon = await startDaemon(t, ['--data-dir', dataDir]);
  const results = await Promise.all(
    Array.from({ length: 20 }, () => request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${key.secret}` } })),
  );
  t.same(new Set(results.map((r) => r.status)), new Set([200]), 'no 429 even above the key rpm');
  t.notOk(results[0].headers['x-ratelimit-limit-requests']);
});

/** The ApiError a call rejects with, or undefined if it does not. */
async function thrown(fn: () => unknown): Promise<ApiError | undefined> {
  try {
    await fn();
  } catch (err) {
    return err as ApiError;
  }
  return undefined;
}

t.test('token limits: reservations are exact, refused ones name the limit, settling gives back unused tokens', async (t) => {
  const limits = new KeyLimits();
  const quota = { keyId: 'key_t', rpm: 100, tpm: 1000 };
  const now = 1_000_000;
  t.equal((await limits.reserveTokens(quota, 600, now))['x-ratelimit-remaining-tokens'], '400');
  const refused = await thrown(() => limits.reserveTokens(quota, 600, now));
  t.ok(refused instanceof ApiError);
  t.equal(refused!.status, 429);
  t.equal(refused!.type, 'tokens');
  t.match(refused!.headers['retry-after'], /^\d+$/);
  limits.settleTokens(quota, 600, 100, now);
  t.equal((await limits.reserveTokens(quota, 600, now))['x-ratelimit-remaining-tokens'], '300', 'unused tokens came back');
  const tooBig = await thrown(() => limits.reserveTokens(quota, 5000, now));
  t.match(tooBig?.message, /more than the 1000 tokens per minute/);
  t.equal(
    (await limits.reserveTokens(quota, 300, now + 30_000))['x-ratelimit-remaining-tokens'],
    '500',
    'half a minute refills half the limit',
  );
});

t.test("reset durations read like OpenAI's", async (t) => {
  t.equal(formatDuration(20), '20ms');
  t.equal(formatDuration(6000), '6s');
  t.equal(formatDuration(2500), '2.5s');
  t.equal(formatDuration(90_000), '1m30s');
});
