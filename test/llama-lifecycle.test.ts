// Model lifecycle on the real engine: loading on first use (503 until ready), the bounded per-model queue, and a
// client disconnect freeing its sequence.
import { writeFileSync } from 'node:fs';
import http from 'node:http';
import t from 'tap';
import OpenAI from 'openai';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = `${dir}/data`;
const key = createKey(dataDir);
const config = `${dir}/config.json`;
writeFileSync(config, JSON.stringify({ models: { load: 'on-demand', parallel: 1, queue: 1 } }));
const daemon = await startDaemon(t, ['--config', config, '--data-dir', dataDir, ...fixtures.args]);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const health = async (): Promise<any> =>
  (await fetch(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` } })).json();

t.test('on-demand: listed before loading; the first call gets 503 model_not_ready with Retry-After; then it serves', async (t) => {
  for (let i = 0; i < 100 && !(await client.models.list()).data.length; i++) await new Promise((r) => setTimeout(r, 100));
  // On demand, a model that verifies and fits is listed before it is loaded (broken-chat fails only when it loads).
  t.same(
    (await client.models.list()).data.map((m) => m.id).sort(),
    ['broken-chat', 'tiny-chat', 'tiny-embed'],
    'verified models are listed',
  );
  const before = await health();
  t.equal(before.models.find((m: { id: string }) => m.id === 'tiny-chat').readiness, 'unloaded');

  const first = await client.chat.completions
    .create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
    .catch((e) => e);
  t.ok(first instanceof OpenAI.APIError);
  t.equal(first.status, 503);
  t.equal(first.code, 'model_not_ready');
  t.match(first.headers.get('retry-after'), /^\d+$/);

  let served: OpenAI.ChatCompletion | undefined;
  for (let i = 0; i < 100 && !served; i++) {
    served = await client.chat.completions
      .create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      .catch(() => undefined);
    if (!served) await new Promise((r) => setTimeout(r, 100));
  }
  t.ok(served, 'served once loaded');
  t.equal((await health()).models.find((m: { id: string }) => m.id === 'tiny-chat').readiness, 'ready');
});

t.test('on-demand: a model that fails to load is withdrawn from the list and reported', async (t) => {
  const first = await client.chat.completions.create({ model: 'broken-chat', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
  t.equal(first.status, 503, 'loading');
  let status = 503;
  for (let i = 0; i < 100 && status === 503; i++) {
    await new Promise((r) => setTimeout(r, 100));
    status = (await client.chat.completions.create({ model: 'broken-chat', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e))
      .status;
  }
  t.equal(status, 404, 'then withdrawn: 404 model_not_found');
  t.notOk(
    (await client.models.list()).data.some((m) => m.id === 'broken-chat'),
    'no longer listed',
  );
  const report = (await health()).models.find((m: { id: string }) => m.id === 'broken-chat');
  t.equal(report.readiness, 'failed');
  t.match(report.detail, /failed to load/);
});

/** Starts a long streamed generation and resolves once its first chunk arrived; returns the request to abort. */
function longStream(): Promise<{ req: http.ClientRequest; done: Promise<number> }> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'go' }],
      max_tokens: 1000,
      stream: true,
      temperature: 1,
    });
    const req = http.request(`${daemon.baseURL}/chat/completions`, {
      method: 'POST',
      agent: false,
      headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    });
    const done = new Promise<number>((res) => req.on('close', () => res(0)));
    req.on('response', (res) => {
      res.once('data', () => resolve({ req, done }));
      res.on('error', () => {});
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'ECONNRESET') reject(err);
    });
    req.end(body);
  });
}

t.test('the queue is bounded: one running, one waiting, the next gets 503 server_overloaded', async (t) => {
  const running = await longStream();
  const waiting = client.chat.completions.create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'w' }], max_tokens: 2 });
  // Health shows each model's load: go on only once the second call is really queued behind the first.
  let queued = false;
  for (let i = 0; i < 200 && !queued; i++) {
    const model = (await health()).models.find((m: { id: string }) => m.id === 'tiny-chat');
    queued = model.busy === 1 && model.waiting === 1;
    if (!queued) await new Promise((r) => setTimeout(r, 5));
  }
  t.ok(queued, 'health reports one call running and one waiting');
  const refused = await client.chat.completions
    .create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'r' }], max_tokens: 2 })
    .catch((e) => e);
  t.equal(refused.status, 503);
  t.equal(refused.code, 'server_overloaded');
  t.match(refused.headers.get('retry-after'), /^\d+$/);
  // A streamed call is refused the same way: a real 503, not an error event inside a 200.
  const streamed = await request(`${daemon.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny-chat', messages: [{ role: 'user', content: 's' }], max_tokens: 2, stream: true }),
  });
  t.equal(streamed.status, 503, 'a streamed call gets 503 too');
  t.equal(streamed.json?.error?.code, 'server_overloaded');
  t.match(String(streamed.headers['retry-after']), /^\d+$/);
  running.req.destroy();
  const served = await waiting;
  t.equal(served.object, 'chat.completion', 'the waiting call is served once the running one ends');
});

t.test('a client that disconnects mid-stream frees its sequence at once', async (t) => {
  for (let round = 0; round < 3; round++) {
    const stream = await longStream();
    stream.req.destroy();
    await stream.done;
  }
  // With one sequence and one queue place, a leaked sequence would make this wait for 1000 tokens or refuse it.
  const started = Date.now();
  const r = await client.chat.completions.create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'after' }], max_tokens: 4 });
  t.equal(r.object, 'chat.completion');
  t.ok(Date.now() - started < 3000, 'served without waiting for the abandoned generations');
});
