// The operator's counters, alerts and checklist through a running daemon (device posture, the real llama.cpp engine on
// a tiny generated model): calls counted per model with their tokens and durations, errors by code, redactions by
// type (never values); the console's series (administrators only) and the Prometheus text endpoint (on when asked, on
// its own address; off by default on the sealed postures); alerts raised and cleared; the counts kept across a
// restart; the first-run checklist's marks.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { ConfigError, loadConfig } from '../daemon/config/index.js';
import { makeModelFixtures } from './fixtures/models.js';
import { cli, createKey, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';
import { DashboardClient } from './helpers/dashboard.js';
import { request } from './helpers/http.js';

const PASSWORD = 'a passphrase long enough 42';
const NATIONAL_ID = '1000000008';
const dir = tempDir(t, 'sov-operator-metrics-');
const fixtures = makeModelFixtures(dir);
const dataDir = join(dir, 'data');
const config = join(dir, 'device.json');
writeFileSync(
  config,
  JSON.stringify({
    posture: 'device',
    dataDir,
    manifest: fixtures.manifest,
    modelsDir: fixtures.modelsDir,
    metrics: { prometheus: true, listen: { host: '127.0.0.1', port: 0 } },
    // A checkpoint older than 2 s is late: the log idles (no heartbeat for an hour), then a call brings a new one.
    audit: { heartbeatMs: 3_600_000 },
    alerts: { checkpointLagSeconds: 2, diskFreePercent: 100 },
  }),
);
const key = createKey(dataDir, 'ops', ['--config', config]);
for (const [email, role] of [
  ['op@bank.example', 'admin'],
  ['member@bank.example', 'member'],
] as const) {
  const made = cli(['admin', 'create', '--email', email, '--password-stdin', '--config', config], {}, `${PASSWORD}\n`);
  if (made.code !== 0) throw new Error(made.stderr);
  const set = cli(['admin', 'role', '--email', email, role, '--config', config]);
  if (set.code !== 0) throw new Error(set.stderr);
}

async function serve(): Promise<{ daemon: RunningDaemon; client: OpenAI; metricsUrl: string }> {
  const daemon = await startDaemon(t, ['--config', config]);
  const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
  for (let until = Date.now() + 60_000; ;) {
    const health = (await client.get('/health')) as { models: Array<{ id: string; readiness: string }> };
    if (health.models.some((m) => m.id === 'tiny-chat' && m.readiness === 'ready')) break;
    if (Date.now() > until) throw new Error('tiny-chat not ready');
    await new Promise((r) => setTimeout(r, 200));
  }
  const line = daemon.logs.find((l) => l.includes('the Prometheus endpoint is serving'));
  const metricsUrl = line ? (JSON.parse(line) as { url: string }).url : '';
  return { daemon, client, metricsUrl };
}

async function signIn(origin: string, email: string): Promise<DashboardClient> {
  const browser = new DashboardClient(origin);
  await browser.open();
  const res = await browser.call('POST', '/login', { email, password: PASSWORD });
  if (res.status !== 200) throw new Error(`sign-in: ${res.status} ${res.text}`);
  return browser;
}

interface Health {
  alerts: Array<{ code: string; severity: string; since: string; message: string }>;
  disk: { used_bytes: number; free_bytes: number; total_bytes: number };
}

const { daemon, client, metricsUrl } = await serve();

/** Prometheus's value of a line `name{labels} value`, or undefined. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

t.test('calls are counted per model with tokens and durations; errors by code; redactions by type, never values', async (t) => {
  for (let i = 0; i < 3; i++) {
    await client.chat.completions.create({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: `My national ID is ${NATIONAL_ID}` }],
      max_tokens: 3,
    });
  }
  const wrong = new OpenAI({ apiKey: 'sk-sov-not-a-key', baseURL: daemon.baseURL, maxRetries: 0 });
  const statusOf = (p: Promise<unknown>) => p.then(() => 200).catch((e: { status?: number }) => e.status ?? 0);
  t.equal(await statusOf(wrong.models.list()), 401);
  t.equal(await statusOf(client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] })), 404);

  t.match(metricsUrl, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/, 'the endpoint is on its own port');
  t.not(new URL(metricsUrl).port, new URL(daemon.origin).port);
  const scraped = await request(metricsUrl);
  t.equal(scraped.status, 200);
  t.match(scraped.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  const text = scraped.text;
  t.equal(sample(text, 'sovereign_model_calls_total{model="tiny-chat"}'), 3);
  t.equal(sample(text, 'sovereign_model_ready{model="tiny-chat"}'), 1);
  t.ok(sample(text, 'sovereign_model_tokens_total{model="tiny-chat",kind="completion"}')! > 0, 'generated tokens counted');
  t.equal(sample(text, 'sovereign_model_call_duration_seconds_count{model="tiny-chat"}'), 3);
  t.equal(sample(text, 'sovereign_model_call_duration_seconds_bucket{model="tiny-chat",le="+Inf"}'), 3);
  t.equal(sample(text, 'sovereign_errors_total{code="invalid_api_key"}'), 1);
  t.equal(sample(text, 'sovereign_errors_total{code="model_not_found"}'), 1);
  t.ok(sample(text, 'sovereign_redactions_total{type="NATIONAL_ID"}')! >= 3, 'the national IDs are counted by type');
  t.notMatch(text, new RegExp(NATIONAL_ID), 'never the value');
  t.notMatch(text, /sk-sov|key_|proj_/, 'no key or project');
  t.equal((await request(metricsUrl.replace('/metrics', '/v1/models'))).status, 404, 'only /metrics is served there');
  t.equal((await request(`${daemon.origin}/metrics`)).status, 404, 'and /metrics is not on the API address');

  const admin = await signIn(daemon.origin, 'op@bank.example');
  const hour = await admin.call('GET', '/metrics?hours=1');
  t.equal(hour.status, 200);
  const series = hour.json as {
    buckets: number;
    stepSeconds: number;
    calls: number[];
    models: Record<string, { calls: number[]; tokens: number[]; p95Ms: Array<number | null>; totals: { calls: number; p95Ms: number } }>;
    errorCodes: Record<string, number[]>;
    redactions: Record<string, number[]>;
  };
  t.equal(series.buckets, 60);
  t.equal(series.stepSeconds, 60);
  const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
  t.equal(series.models['tiny-chat'].totals.calls, 3);
  t.equal(sum(series.models['tiny-chat'].calls), 3);
  t.ok(sum(series.models['tiny-chat'].tokens) > 0);
  t.ok(series.models['tiny-chat'].totals.p95Ms > 0, 'a p95 duration');
  t.equal(sum(series.errorCodes.invalid_api_key), 1);
  t.ok(sum(series.redactions.NATIONAL_ID) >= 3);
  t.ok(sum(series.calls) >= 6, 'every /v1 call counts, health included');
  t.equal((await admin.call('GET', '/metrics?hours=5')).status, 400, 'an unknown period is refused');
  const day = (await admin.call('GET', '/metrics?hours=24')).json as { buckets: number; stepSeconds: number };
  t.same([day.buckets, day.stepSeconds], [24, 3600], 'a day in hours, read from the hourly counts');

  const member = await signIn(daemon.origin, 'member@bank.example');
  const refused = await member.call('GET', '/metrics?hours=1');
  t.equal(refused.status, 403, "a member does not see the device's counters");
  t.equal(refused.json.error.code, 'permission_denied');
});

t.test('alerts: the checkpoint late raised and cleared; the disk below its threshold; in health and Prometheus', async (t) => {
  // Looked at through Prometheus: a /v1/health call is itself a call the log records, which brings a checkpoint.
  const alertsNow = async () => [...(await request(metricsUrl)).text.matchAll(/^sovereign_alert\{code="(\w+)"/gm)].map((m) => m[1]);
  let codes: string[] = [];
  for (let until = Date.now() + 15_000; Date.now() < until;) {
    codes = await alertsNow();
    if (codes.includes('audit_checkpoint_late')) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  t.ok(codes.includes('audit_checkpoint_late'), 'raised once the newest checkpoint is older than the limit');
  t.ok(codes.includes('disk_nearly_full'), 'the disk below the (here: 100%) threshold');
  const health = (await client.get('/health')) as Health;
  t.ok(health.disk.total_bytes > 0 && health.disk.used_bytes > 0, 'health has the disk');
  t.match(health.alerts.find((a) => a.code === 'audit_checkpoint_late')!.message, /limit is 2 s/);
  const text = (await request(metricsUrl)).text;
  t.match(text, /sovereign_alert\{code="audit_checkpoint_late",severity="critical",subject=""\} 1/);
  t.ok(await daemon.logged('alert raised'), 'the raise is logged');
  // The fixtures' tampered file is there but not served: withdrawn, with why.
  t.match(text, /sovereign_alert\{code="model_withdrawn",severity="warning",subject="tampered-chat"\} 1/);
  const withdrawn = health.alerts.find((a) => a.code === 'model_withdrawn' && a.message.includes('tampered-chat'));
  t.match(withdrawn?.message, /checksum|SHA-256|sha256/i, 'the reason is given');

  // A call grows the log: a checkpoint follows within a second and the alert clears.
  for (let until = Date.now() + 10_000; Date.now() < until;) {
    await client.models.list();
    await new Promise((r) => setTimeout(r, 300));
    codes = await alertsNow();
    if (!codes.includes('audit_checkpoint_late')) break;
  }
  t.notOk(codes.includes('audit_checkpoint_late'), 'cleared by a new checkpoint');
  t.ok(await daemon.logged('alert cleared'), 'the clearing is logged');
});

t.test('the first-run checklist: what the daemon sees, and the marks an administrator gives', async (t) => {
  const admin = await signIn(daemon.origin, 'op@bank.example');
  type Item = { id: string; done: boolean; command: string | null; page: string | null };
  const items = () => admin.call('GET', '/overview').then((r) => (r.json as { checklist: Item[] }).checklist);
  const first = await items();
  t.same(
    first.map((i) => [i.id, i.done]),
    [
      ['audit_key_in_tpm', false],
      ['model_verified', true],
      ['first_key', true],
      ['first_verified_receipt', false],
    ],
    'a software signer is not the TPM; no certificate on the device posture',
  );
  t.equal(first[0].command, 'sovereign audit init-tpm');
  const leaf = Number((await client.models.list().withResponse()).response.headers.get('x-audit-leaf'));
  t.equal(
    (await admin.call('POST', '/checklist', { item: 'first_verified_receipt', leaf: 10 ** 9 })).status,
    400,
    'a leaf the log has not',
  );
  t.equal((await admin.call('POST', '/checklist', { item: 'nothing' })).status, 400);
  t.equal((await admin.call('POST', '/checklist', { item: 'first_verified_receipt', leaf }, { csrf: null })).status, 403, 'CSRF');
  const member = await signIn(daemon.origin, 'member@bank.example');
  t.equal((await member.call('POST', '/checklist', { item: 'first_verified_receipt', leaf })).status, 403);
  t.equal((await member.call('GET', '/overview')).json.checklist, null, 'a member has no checklist');
  const marked = await admin.call('POST', '/checklist', { item: 'first_verified_receipt', leaf });
  t.equal(marked.status, 200);
  t.ok((await items()).find((i) => i.id === 'first_verified_receipt')!.done);
});

t.test('the counts are kept across a restart', async (t) => {
  await daemon.stop();
  const again = await serve();
  const admin = await signIn(again.daemon.origin, 'op@bank.example');
  const series = (await admin.call('GET', '/metrics?hours=1')).json as { models: Record<string, { totals: { calls: number } }> };
  t.equal(series.models['tiny-chat']?.totals.calls, 3, 'the minutes were written at close');
  for (const hours of [24, 720]) {
    const longer = (await admin.call('GET', `/metrics?hours=${hours}`)).json as typeof series;
    t.equal(longer.models['tiny-chat']?.totals.calls, 3, `and their hours, read for ${hours} hours`);
  }
  const verified = cli(['audit', 'verify', '--config', config], { SOVEREIGN_AUDIT_SIGNER: 'software' });
  t.equal(verified.code, 0, `the log with the checklist's entry verifies: ${verified.stderr}`);
});

t.test('Prometheus is off by default on the sealed postures and its address is checked', async (t) => {
  const problems = (file: Record<string, unknown>) => {
    const path = join(dir, `c-${Math.random()}.json`);
    writeFileSync(path, JSON.stringify({ dataDir, ...file }));
    try {
      loadConfig({ config: path }, {});
      return [];
    } catch (err) {
      if (err instanceof ConfigError) return err.problems;
      throw err;
    }
  };
  const { config: device } = loadConfig({ dataDir }, {});
  t.equal(device.metrics.prometheus, undefined);
  t.match(problems({ posture: 'device', metrics: { prometheus: true, listen: { host: '203.0.113.7', port: 9464 } } }), [
    /sealed: serve \/metrics on loopback or an internal-network address/,
  ]);
  t.match(problems({ posture: 'device', metrics: { prometheus: true, listen: { host: 'metrics.local', port: 9464 } } }), [
    /must be an IP address/,
  ]);
  t.match(
    problems({ posture: 'device', listen: { port: 9464 }, metrics: { prometheus: true, listen: { host: '127.0.0.1', port: 9464 } } }),
    [/the API's own address/],
  );
  const sealed = join(dir, 'sealed.json');
  writeFileSync(sealed, JSON.stringify({ posture: 'device', dataDir: join(dir, 'sealed-data'), modelsDir: join(dir, 'none') }));
  const quiet = await startDaemon(t, ['--config', sealed]);
  t.notOk(
    quiet.logs.some((l) => l.includes('Prometheus')),
    'no Prometheus endpoint on a device unless asked',
  );
});
