// The operator's console against what a hostile client, an odd configuration or a damaged data directory brings:
// model ids that are names of Object's own properties, stored minutes of another shape, a health source that throws
// on the alerts' timer, alert subjects with any character, the Prometheus listener's port taken, slow and many
// clients, and the console's period given as a prototype's name.
import net from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { AlertBook } from '../daemon/alerts/index.js';
import type { HealthReport } from '../daemon/health/index.js';
import { OperatorMetrics } from '../daemon/metrics/index.js';
import { MAX_CONNECTIONS, prometheusText, startPrometheus, type PrometheusSources } from '../daemon/prometheus/index.js';
import { openStore } from '../daemon/store/index.js';
import { cli, startDaemon, tempDir } from './helpers/daemon.js';
import { DashboardClient } from './helpers/dashboard.js';
import { request } from './helpers/http.js';

const dir = tempDir(t, 'sov-console-robust-');
const MINUTE = 60_000;

const call = (model: string | null, durationMs = 3) => ({
  model,
  status: 200,
  errorCode: null,
  durationMs,
  redactions: null,
  outputRedactions: null,
});

t.test("model ids that name Object's properties are counted as any other, and Object is left alone", async (t) => {
  const dataDir = join(dir, 'names');
  const store = openStore(dataDir);
  t.teardown(() => store.close());
  const metrics = new OperatorMetrics(store, { dataDir, queues: () => [] });
  // Valid ids: a manifest's are lower case, an upstream's may have capitals (never a leading '_': '__proto__' cannot be one).
  const ids = ['constructor', 'toString', 'hasOwnProperty', 'valueOf'];
  for (const id of ids) {
    t.doesNotThrow(() => metrics.recordCall(call(id)), `a call to ${id}`);
    t.doesNotThrow(() => metrics.recordTokens(id, 5, 2));
  }
  t.equal((Object as unknown as Record<string, unknown>).calls, undefined, 'Object was not counted on');
  t.equal((Object.prototype as unknown as Record<string, unknown>).calls, undefined, 'nor its prototype');
  await metrics.flush();
  for (const id of ids) metrics.recordCall(call(id));
  const series = metrics.series(1, 60);
  for (const id of ids) {
    t.ok(Object.hasOwn(series.models, id), `${id} has its series`);
    t.equal(series.models[id].totals.calls, 2, `${id}: the written and the pending call`);
    t.equal(
      series.models[id].tokens.reduce((a, b) => a + b, 0),
      7,
    );
  }
  t.equal(JSON.parse(JSON.stringify(series)).models.constructor.totals.calls, 2, 'as the console reads it');
});

t.test('a stored minute of another shape neither stops the flush nor the charts', async (t) => {
  const dataDir = join(dir, 'damaged');
  const store = openStore(dataDir);
  t.teardown(() => store.close());
  const errors: Error[] = [];
  const metrics = new OperatorMetrics(store, { dataDir, queues: () => [], onError: (err) => errors.push(err) });
  const db = store.db<unknown, number>('operator-metrics');
  const now = Date.now();
  const minute = Math.floor(now / MINUTE);
  await db.put(minute - 3, { calls: 2 });
  await db.put(minute - 2, { calls: 'many', models: { m: { calls: 1, latency: 'fast' } }, errorCodes: null, disk: 7 });
  await db.put(minute - 1, 'not a record');
  for (const at of [minute - 3, minute - 2, minute - 1]) metrics.recordCall(call('m'), at * MINUTE + 1);
  await metrics.flush();
  t.same(errors, [], 'the flush wrote its minutes');
  const series = metrics.series(1, 60, now);
  t.equal(
    series.calls.reduce((a, b) => a + b, 0),
    5,
    'the counts that were counts, and the new calls',
  );
  t.equal(series.models.m.totals.calls, 4);
  t.ok(
    series.calls.every((n) => Number.isFinite(n)),
    'never NaN',
  );
});

const report = (over: Partial<HealthReport> = {}) => ({ status: 'ok', uptime_s: 1, models: [], ...over }) as unknown as HealthReport;

t.test('alerts: a health source that throws on the timer is logged, not fatal; subjects with any character', async (t) => {
  const warned: string[] = [];
  const cleared: unknown[] = [];
  const log = {
    warn: (_obj: object, msg: string) => warned.push(msg),
    info: (obj: object) => cleared.push(obj),
  };
  const book = new AlertBook(
    {
      thresholds: { checkpointLagSeconds: 900, diskFreePercent: 10, diskFullHours: 72, egressHours: 24 },
      disk: () => null,
      prometheusProblem: () => null,
    },
    log,
  );
  t.teardown(() => book.close());
  book.watch(() => {
    throw new Error('a source failed');
  }, 10);
  await new Promise((r) => setTimeout(r, 60));
  t.ok(
    warned.some((m) => m.includes('could not be evaluated')),
    'logged',
  );

  const subject = 'edge|a"b';
  book.modelWithdrawn(subject, 'its file went');
  const raised = book.evaluate(report());
  t.same(
    raised.map((a) => [a.code, a.subject]),
    [['model_withdrawn', subject]],
  );
  book.modelListed(subject);
  t.same(book.evaluate(report()), []);
  t.same(cleared, [{ alert: 'model_withdrawn', subject }], 'the clearing names the whole subject');
});

t.test(
  'alerts from each cause: an egress refusal for its window, the disk by room and by rate, the replica, the limiter, an upstream',
  async (t) => {
    let disk: { free: number; total: number; fullInSeconds: number | null } | null = { free: 50, total: 100, fullInSeconds: null };
    const book = new AlertBook(
      {
        thresholds: { checkpointLagSeconds: 900, diskFreePercent: 10, diskFullHours: 72, egressHours: 24 },
        disk: () => disk,
        prometheusProblem: () => null,
      },
      { warn: () => {}, info: () => {} },
    );
    const now = Date.parse('2026-11-28T12:00:00Z');
    const codes = (over: Partial<HealthReport>, at = now) => book.evaluate(report(over), at).map((a) => `${a.code}:${a.severity}`);
    const egress = (last: string | null) =>
      ({ egress: { last_refused_at: last, refused_since_first_boot: 2 } }) as unknown as Partial<HealthReport>;
    t.same(codes(egress(null)), [], 'nothing refused: no alert');
    t.same(codes(egress('2026-11-28T11:00:00Z')), ['egress_refused:critical'], 'a refusal an hour ago');
    t.same(codes(egress('2026-11-27T11:00:00Z')), [], 'cleared once egressHours have passed');
    disk = { free: 8, total: 100, fullInSeconds: null };
    t.same(codes({}), ['disk_nearly_full:warning'], 'under diskFreePercent');
    disk = { free: 4, total: 100, fullInSeconds: null };
    t.same(codes({}), ['disk_nearly_full:critical'], 'under half of it');
    disk = { free: 60, total: 100, fullInSeconds: 3600 * 10 };
    t.same(codes({}), ['disk_nearly_full:warning'], 'full within diskFullHours at its rate');
    disk = null;
    t.same(
      codes({
        shared_state: { store: 'postgres', current: false, problem: 'PostgreSQL does not answer', since: null },
        limiter: { store: 'redis', problem: 'Redis does not answer' },
        upstreams: [
          { name: 'rack', answering: false, problem: 'ECONNREFUSED', checked_at: '2026-11-28T11:59:00Z', retried: 0 },
          { name: 'new', answering: false, problem: null, checked_at: null, retried: 0 },
        ],
      }),
      ['shared_state_stale:critical', 'limiter_unavailable:critical', 'upstream_down:warning'],
      'an upstream not yet checked is not down',
    );
    t.same(
      codes({ audit: { entries: 5, signer: null, latest_checkpoint: null, problem: 'the TPM does not answer' } }),
      ['audit_signer_degraded:critical'],
      'a signer that cannot sign; no checkpoint yet within the limit is not late',
    );
  },
);

function sources(): PrometheusSources {
  return {
    health: () => report({ models: [{ id: 'x"}\n1', readiness: 'ready' }] as unknown as HealthReport['models'] }),
    totals: {
      calls: new Map([
        [
          'a\\"\n{',
          { calls: 1, errors: 0, promptTokens: 1, completionTokens: 1, latency: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], sumMs: 4 },
        ],
      ]),
      errorCodes: new Map(),
      redactions: new Map(),
    },
    disk: () => null,
  };
}

t.test('Prometheus: labels escaped, a histogram with its sum, HEAD and other methods', async (t) => {
  const text = prometheusText(sources());
  for (const line of text.trimEnd().split('\n')) {
    t.match(line, /^(# (HELP|TYPE) \w+ .+|\w+(\{(\w+="([^"\\\n]|\\[\\"n])*",?)*\})? -?[\d.e+-]+|\w+\{.*\} \+?Inf)$/, line);
  }
  t.match(text, /sovereign_model_call_duration_seconds_sum\{model="a\\\\\\"\\n\{"\} 0\.004/);

  const up = startPrometheus({ host: '127.0.0.1', port: 0 }, sources(), { problem: () => {}, listening: () => {} });
  t.teardown(() => up.close());
  while (!up.address()) await new Promise((r) => setTimeout(r, 10));
  const base = `http://127.0.0.1:${up.address()!.port}`;
  const head = await request(`${base}/metrics`, { method: 'HEAD' });
  t.equal(head.status, 200);
  t.equal(head.text, '');
  t.equal((await request(`${base}/metrics`, { method: 'POST', body: 'x' })).status, 405);
  t.equal((await request(`${base}//metrics`)).status, 404);
  t.equal((await request(`${base}/metrics/..`)).status, 404);
});

t.test('Prometheus: a port already taken is a problem reported, not a crash', async (t) => {
  const holder = net.createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => holder.close(() => r())));
  const port = (holder.address() as net.AddressInfo).port;
  const problems: Error[] = [];
  const taken = startPrometheus({ host: '127.0.0.1', port }, sources(), { problem: (err) => problems.push(err), listening: () => {} });
  t.teardown(() => taken.close());
  while (!problems.length) await new Promise((r) => setTimeout(r, 10));
  t.match(taken.problem(), /EADDRINUSE/);
  t.equal(taken.address(), null);
});

t.test('Prometheus: a client trickling its headers is cut within seconds; connections are capped', async (t) => {
  const up = startPrometheus({ host: '127.0.0.1', port: 0 }, sources(), { problem: () => {}, listening: () => {} });
  t.teardown(() => up.close());
  while (!up.address()) await new Promise((r) => setTimeout(r, 10));
  const port = up.address()!.port;

  const slow = net.connect(port, '127.0.0.1');
  const started = Date.now();
  slow.write('GET /metrics HTTP/1.1\r\nHost: x\r\n');
  const trickle = setInterval(() => slow.write('X-Slow: 1\r\n'), 300);
  await new Promise<void>((r) => {
    slow.on('close', () => r());
    slow.on('error', () => {});
  });
  clearInterval(trickle);
  const held = Date.now() - started;
  t.ok(held < 9_000, `cut after ${held} ms (the headers timeout is 5 s)`);

  const idle: net.Socket[] = [];
  for (let i = 0; i < MAX_CONNECTIONS + 8; i++) {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    idle.push(s);
    await new Promise((r) => s.once('connect', r));
  }
  t.teardown(() => idle.forEach((s) => s.destroy()));
  await new Promise((r) => setTimeout(r, 200));
  const open = idle.filter((s) => !s.destroyed && !s.readableEnded).length;
  t.ok(open <= MAX_CONNECTIONS, `${open} kept open of ${idle.length}`);
});

t.test("the console's period: a prototype's name, an array, a number out of the list are refused, not a 500", async (t) => {
  const dataDir = join(dir, 'daemon');
  const config = join(dir, 'device.json');
  writeFileSync(config, JSON.stringify({ posture: 'device', dataDir, modelsDir: join(dir, 'none') }));
  const password = 'a passphrase long enough 42';
  const made = cli(['admin', 'create', '--email', 'op@bank.example', '--password-stdin', '--config', config], {}, `${password}\n`);
  t.equal(made.code, 0, made.stderr);
  const daemon = await startDaemon(t, ['--config', config]);
  const admin = new DashboardClient(daemon.origin);
  await admin.open();
  t.equal((await admin.call('POST', '/login', { email: 'op@bank.example', password })).status, 200);
  for (const hours of ['__proto__', 'constructor', 'toString', 'abc', '-1', '1e9', '1&hours=24', '']) {
    const res = await admin.call('GET', `/metrics?hours=${hours}`);
    t.equal(res.status, 400, `hours=${hours}`);
    t.equal(res.json?.error?.param, 'hours');
  }
  t.equal((await admin.call('GET', '/metrics?hours=720')).status, 200);
  for (const body of [
    { item: '__proto__' },
    { item: 'first_verified_receipt', leaf: '1' },
    { item: 'first_verified_receipt', leaf: 1e300 },
  ]) {
    t.equal((await admin.call('POST', '/checklist', body)).status, 400, JSON.stringify(body));
  }
  t.equal((await admin.call('POST', '/checklist', { item: 'tls_fingerprint_recorded', fingerprint: {} })).status, 400);
});
