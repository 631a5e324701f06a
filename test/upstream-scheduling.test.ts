// Calls to an upstream wait for its connections in the daemon's fair order, not in arrival order: with one connection
// to a slow upstream, a project flooding it does not keep another project's call behind its queue; health shows the
// upstream's queue by tier, and the call that waited says how long.
import http from 'node:http';
import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import OpenAI from 'openai';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';

// An OpenAI-shaped server that takes 150 ms over each chat call.
const upstream = http.createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    if (req.method === 'GET') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'slow' }] }));
    setTimeout(() => {
      res.end(
        JSON.stringify({
          choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
        }),
      );
    }, 150);
  });
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(() => upstream.close());

const dir = tempDir(t);
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({
    dataDir,
    upstreams: [
      {
        name: 'gpu',
        baseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
        connections: 1,
        models: [{ id: 'gpu-chat', upstreamModel: 'slow', capability: 'chat' }],
      },
    ],
  }),
);
const a = createKey(dataDir, 'flood', ['--config', config]);
const b = createKey(dataDir, 'steady', ['--config', config]);
const daemon = await startDaemon(t, ['--config', config]);
const clientA = new OpenAI({ apiKey: a.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const clientB = new OpenAI({ apiKey: b.secret, baseURL: daemon.baseURL, maxRetries: 0 });
for (const until = Date.now() + 20_000; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
  if ((await clientA.models.list()).data.some((m) => m.id === 'gpu-chat')) break;
}

t.test("a project flooding an upstream does not keep another project's call behind its queue", async (t) => {
  const done: string[] = [];
  const call = { model: 'gpu-chat', messages: [{ role: 'user' as const, content: 'hi' }] };
  const queued = [0, 1, 2, 3, 4, 5].map((i) => clientA.chat.completions.create(call).then(() => void done.push(`a${i}`)));
  await new Promise((r) => setTimeout(r, 60));
  const health = (await (await fetch(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${a.secret}` } })).json()) as {
    models: Array<{ id: string; busy: number; waiting: number; waiting_by_tier: Record<string, number> }>;
  };
  const model = health.models.find((m) => m.id === 'gpu-chat')!;
  t.equal(model.busy, 1, 'one connection');
  t.ok(model.waiting >= 3, `${model.waiting} waiting for it`);
  t.same(model.waiting_by_tier, { priority: 0, default: model.waiting, flex: 0 });

  const { response } = await clientB.chat.completions.create(call).withResponse();
  done.push('b');
  t.ok(Number(response.headers.get('x-queue-wait-ms')) > 0, `B waited ${response.headers.get('x-queue-wait-ms')} ms`);
  await Promise.all(queued);
  t.ok(done.indexOf('b') <= 1, `B is served next (${done.join(', ')})`);
});
