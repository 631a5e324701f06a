// The operator's console against what a hostile client, an odd configuration or a damaged data directory brings:
// model ids that are names of Object's own properties, stored minutes of another shape, a health source that throws
// on the alerts' timer, alert subjects with any character, the Prometheus listener's port taken, slow and many
// clients, and the console's period given as a prototype's name.
import { join } from 'node:path';
import t from 'tap';
import { AlertBook } from '../daemon/alerts/index.js';
import type { HealthReport } from '../daemon/health/index.js';
import { OperatorMetrics } from '../daemon/metrics/index.js';
import { openStore } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';

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
