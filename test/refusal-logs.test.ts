// What the daemon logs when it refuses a call, read from its own log lines: the refusals of normal operation (a
// receipt asked for before a checkpoint covers its entry, a model still loading, the device at capacity, a key at its
// share) are info lines, and only real failures (a 500) are at error, where an operator's alerts look.
import http from 'node:http';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeTinyGguf } from './fixtures/gguf.js';
import { entry } from './fixtures/models.js';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';

const INFO = 30;
const ERROR = 50;

// An upstream that lists its model and fails every call: the daemon's 500 for it is a real failure.
const upstream = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'up-model', object: 'model', created: 1, owned_by: 'x' }] }));
      return;
    }
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: 'engine crashed', type: 'server_error', param: null, code: null } }));
  });
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(() => upstream.close());

const dir = tempDir(t);
const modelsDir = join(dir, 'models');
mkdirSync(modelsDir, { recursive: true });
const chat = writeTinyGguf(join(modelsDir, 'tiny-chat.gguf'), { seed: 42 });
const manifest = join(dir, 'manifest.json');
writeFileSync(manifest, JSON.stringify({ models: [entry('tiny-chat', 'tiny-chat.gguf', 'chat', chat)] }));
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({
    // The first call to a model loads it, and is refused while it loads.
    models: { load: 'on-demand', threads: 1 },
    // No checkpoint while the test runs after the first: a new entry has no receipt yet.
    audit: { checkpointMs: 3_600_000, heartbeatMs: 86_400_000 },
    // Two places in all, one for each key: a key's second call is over its share, a third call over the ceiling.
    limits: { maxInFlight: 2, keyShare: 0.5, projectShare: 0.5, minShare: 1 },
    upstreams: [
      {
        name: 'failing',
        baseUrl: `http://127.0.0.1:${(upstream.address() as { port: number }).port}/v1`,
        retries: 0,
        models: [{ id: 'up-chat', upstreamModel: 'up-model', capability: 'chat' }],
      },
    ],
  }),
);
const dataDir = join(dir, 'data');
const a = createKey(dataDir, 'a');
const b = createKey(dataDir, 'b');
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--config', config, '--models-dir', modelsDir, '--manifest', manifest]);

const call = (path: string, secret: string, body?: unknown) =>
  fetch(`${daemon.baseURL}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
const chatBody = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });

const sleep = (ms: number) => new Promise<false>((r) => setTimeout(() => r(false), ms));

/**
 * A call whose body never finishes arriving: it holds its in-flight place until the returned function is called. It
 * is held once nothing has answered it for 300 ms; one refused (sent while another call held the place) is sent again.
 */
async function hold(secret: string): Promise<() => void> {
  for (let i = 0; i < 10; i++) {
    const req = http.request(`${daemon.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json', 'content-length': '1000' },
    });
    const answered = new Promise<true>((resolve) => {
      req.on('response', (res) => {
        res.resume();
        resolve(true);
      });
      req.on('error', () => resolve(true));
    });
    req.write('{"model":');
    if (!(await Promise.race([answered, sleep(300)]))) return () => req.destroy();
    req.destroy();
  }
  throw new Error('a call could not be held');
}

/** Repeats `attempt` until it answers `status`; at most 5 s. */
async function untilStatus(status: number, attempt: () => Promise<Response>): Promise<Response> {
  let last: Response | undefined;
  for (let i = 0; i < 50; i++) {
    last = await attempt();
    if (last.status === status) return last;
    await last.arrayBuffer();
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no ${status} within 5 s (last ${last?.status})`);
}

interface LogLine {
  level: number;
  msg: string;
  code?: string;
  status?: number;
}

const logged = () =>
  daemon.logs.flatMap((line) => {
    try {
      return [JSON.parse(line) as LogLine];
    } catch {
      return [];
    }
  });

t.test('the refusals of normal operation are info lines; a real failure is an error line', async (t) => {
  const listed = await call('/models', a.secret);
  t.equal(listed.status, 200);
  await listed.arrayBuffer();
  const leaf = listed.headers.get('x-audit-leaf');
  t.ok(leaf, 'the call names its audit entry');

  const receipt = await call(`/audit/anchors?leaf=${leaf}`, a.secret);
  t.equal(receipt.status, 503, 'no receipt before a checkpoint covers the entry');
  t.match(await receipt.json(), { error: { code: 'audit_unavailable', message: /not in a signed checkpoint yet/ } });

  const loading = await call('/chat/completions', a.secret, chatBody('tiny-chat'));
  t.equal(loading.status, 503, 'a model loading on demand');
  t.match(await loading.json(), { error: { code: 'model_not_ready' } });

  // The upstream's model is listed once its first health check has answered.
  const failed = await untilStatus(500, () => call('/chat/completions', a.secret, chatBody('up-chat')));
  t.match(await failed.json(), { error: { code: 'internal_error' } });

  const releaseA = await hold(a.secret);
  const overShare = await call('/models', a.secret);
  t.equal(overShare.status, 429, "a key's second call while its one place is held");
  t.match(await overShare.json(), { error: { code: 'rate_limit_exceeded' } });
  const releaseB = await hold(b.secret);
  const overCeiling = await call('/models', b.secret);
  t.equal(overCeiling.status, 503, 'a third call while both places are held');
  t.match(await overCeiling.json(), { error: { code: 'server_overloaded' } });
  releaseA();
  releaseB();

  // The daemon writes each line before its response, but the test reads its stdout as it comes.
  for (let i = 0; i < 50 && !logged().some((l) => l.code === 'server_overloaded'); i++) await sleep(100);
  const lines = logged();
  const refused = (code: string) => lines.filter((l) => l.code === code);
  for (const [code, status] of [
    ['audit_unavailable', 503],
    ['model_not_ready', 503],
    ['rate_limit_exceeded', 429],
    ['server_overloaded', 503],
  ] as const) {
    t.ok(refused(code).length > 0, `${code} is logged`);
    t.ok(
      refused(code).every((l) => l.level === INFO && l.msg === 'request refused' && l.status === status),
      `${code} at info, as a refusal: ${JSON.stringify(refused(code))}`,
    );
  }
  t.match(refused('internal_error'), [{ level: ERROR, msg: 'request failed' }], 'the 500 at error');
  const errors = lines.filter((l) => l.level >= ERROR);
  t.same(
    errors.map((l) => l.code),
    ['internal_error'],
    'nothing else at error',
  );
});
