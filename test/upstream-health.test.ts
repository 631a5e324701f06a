// An upstream's models follow its health: listed by /v1/models only while the upstream answers its own GET
// /v1/models and names them, withdrawn when it goes down or stops naming one, back when it recovers. Calls that fail
// before the upstream sent anything (no connection, a reset, a 502/503/504) are tried again, up to `retries` times;
// nothing is retried once an answer has started. All over loopback, with a small OpenAI-shaped server that can be
// stopped and started on the same port.
import http from 'node:http';
import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import OpenAI, { APIError } from 'openai';
import t from 'tap';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';

/** What the server names in its model list, and how it answers each chat call (by the last message). */
const state = { listed: ['up-model', 'other-model'], tries: new Map<string, number>(), modelChecks: 0 };

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      state.modelChecks++;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: state.listed.map((id) => ({ id, object: 'model', created: 1, owned_by: 'x' })) }));
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { messages: Array<{ content: string }> };
    const last = body.messages.at(-1)!.content;
    const tries = (state.tries.get(last) ?? 0) + 1;
    state.tries.set(last, tries);
    const [kind, failures] = last.split(':') as [string, string | undefined];
    if (tries <= Number(failures ?? 0)) {
      if (kind === 'reset') return req.socket.destroy();
      if (kind === 'unavailable') {
        res.writeHead(503, { 'content-type': 'application/json' });
        return res.end('{"error":{"message":"warming up"}}');
      }
      if (kind === 'bad-gateway') {
        res.writeHead(502, { 'content-type': 'text/plain' });
        return res.end('bad gateway');
      }
      if (kind === 'failed') {
        res.writeHead(500, { 'content-type': 'application/json' });
        return res.end('{"error":{"message":"boom"}}');
      }
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: 'x',
        object: 'chat.completion',
        created: 1,
        model: 'up-model',
        choices: [{ index: 0, message: { role: 'assistant', content: `answer after ${tries} tries` }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
      }),
    );
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const port = (server.address() as AddressInfo).port;
const stop = () =>
  new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
const start = () => new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
t.teardown(() => (server.listening ? stop() : undefined));

const dir = tempDir(t);
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({
    upstreams: [
      {
        name: 'gpu',
        baseUrl: `http://127.0.0.1:${port}/v1`,
        healthIntervalMs: 200,
        retries: 2,
        timeoutMs: 2000,
        models: [
          { id: 'up-chat', upstreamModel: 'up-model', capability: 'chat' },
          { id: 'other-chat', upstreamModel: 'other-model', capability: 'chat' },
        ],
      },
      {
        // The same server, checked once at start and then only when a call finds it gone.
        name: 'gpu-rarely-checked',
        baseUrl: `http://127.0.0.1:${port}/v1`,
        healthIntervalMs: 3_600_000,
        models: [{ id: 'rarely-checked-chat', upstreamModel: 'up-model', capability: 'chat' }],
      },
    ],
  }),
);
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });

const listed = async (upstream: string) =>
  (await client.models.list()).data
    .filter((m) => m.owned_by === upstream)
    .map((m) => m.id)
    .sort();
/** Waits (up to 10 s) until the upstream's listed models are `ids`, and returns them. */
async function listedBecomes(ids: string[], upstream = 'gpu'): Promise<string[]> {
  const until = Date.now() + 10_000;
  let now = await listed(upstream);
  while (JSON.stringify(now) !== JSON.stringify(ids) && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    now = await listed(upstream);
  }
  return now;
}
const health = async () => (await request(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` } })).json;
const chat = (content: string, model = 'up-chat') =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content }] }).catch((e: unknown) => e as APIError);

t.test('the list follows the upstream: down, a model no longer named, back again', async (t) => {
  t.same(await listedBecomes(['other-chat', 'up-chat']), ['other-chat', 'up-chat'], 'listed once the first check answers');

  state.listed = ['up-model'];
  t.same(await listedBecomes(['up-chat']), ['up-chat'], 'a model the upstream stops naming is withdrawn');
  const gone = await chat('hello', 'other-chat');
  t.equal((gone as APIError).status, 503);
  t.equal((gone as APIError).code, 'model_not_ready');
  t.ok((gone as APIError).headers?.get('retry-after'), 'with Retry-After');
  const named = (await health()).models.find((m: { id: string }) => m.id === 'other-chat');
  t.match(named, { readiness: 'failed', detail: "upstream 'gpu' does not list 'other-model' now" });

  await stop();
  t.same(await listedBecomes([]), [], 'every model withdrawn while the upstream is down');
  const report = await health();
  t.equal(report.status, 'degraded');
  t.match(
    report.upstreams.find((u: { name: string }) => u.name === 'gpu'),
    { answering: false, problem: /it is not answering/, checked_at: /^\d{4}-\d\d-\d\dT/ },
    'health names the upstream that is down, and why',
  );
  t.match(
    report.models.find((m: { id: string }) => m.id === 'up-chat'),
    { readiness: 'failed', detail: /upstream 'gpu': it is not answering/ },
  );
  const down = await chat('hello');
  t.equal((down as APIError).status, 503);
  t.equal((down as APIError).code, 'model_not_ready');

  state.listed = ['up-model', 'other-model'];
  await start();
  t.same(await listedBecomes(['other-chat', 'up-chat']), ['other-chat', 'up-chat'], 'back when the upstream recovers');
  const recovered = await health();
  t.equal(recovered.status, 'ok');
  t.match(
    recovered.upstreams.find((u: { name: string }) => u.name === 'gpu'),
    { answering: true, problem: null },
  );
  const answered = (await chat('hello again')) as OpenAI.ChatCompletion;
  t.equal(answered.choices[0].message.content, 'answer after 1 tries');
});

t.test('failures before the first byte are retried; an answer that started is not', async (t) => {
  await listedBecomes(['other-chat', 'up-chat']);
  const reset = (await chat('reset:1')) as OpenAI.ChatCompletion;
  t.equal(reset.choices?.[0]?.message.content, 'answer after 2 tries', 'a connection reset before any response is tried again');
  const unavailable = (await chat('unavailable:2')) as OpenAI.ChatCompletion;
  t.equal(unavailable.choices?.[0]?.message.content, 'answer after 3 tries', 'two 503s, then an answer: within retries: 2');
  const badGateway = (await chat('bad-gateway:1')) as OpenAI.ChatCompletion;
  t.equal(badGateway.choices?.[0]?.message.content, 'answer after 2 tries', 'a 502 from a proxy in front of it');

  const exhausted = (await chat('unavailable:3')) as APIError;
  t.equal(exhausted.status, 503, 'three refusals exhaust two retries');
  t.equal(exhausted.code, 'server_overloaded');
  t.equal(state.tries.get('unavailable:3'), 3, 'one try and two retries, no more');

  const failed = (await chat('failed:1')) as APIError;
  t.equal(failed.status, 500, 'a 500 is an answer: not retried');
  t.equal(state.tries.get('failed:1'), 1);
  t.notMatch(failed.message, /boom/, 'and its body is not shown');
  const gpu = (await health()).upstreams.find((u: { name: string }) => u.name === 'gpu');
  t.ok(gpu.retried >= 6, `health counts the tries sent again (${gpu.retried})`);
});

t.test('a call that finds the upstream gone has it checked again at once', async (t) => {
  t.same(await listedBecomes(['rarely-checked-chat'], 'gpu-rarely-checked'), ['rarely-checked-chat']);
  await stop();
  await new Promise((resolve) => setTimeout(resolve, 1100));
  t.same(await listed('gpu-rarely-checked'), ['rarely-checked-chat'], 'its next scheduled check is an hour away');
  const failed = (await chat('hello', 'rarely-checked-chat')) as APIError;
  t.equal(failed.status, 503, 'the call finds no server, after its retries');
  t.equal(failed.code, 'model_not_ready');
  t.same(await listedBecomes([], 'gpu-rarely-checked'), [], 'and the check it asked for withdraws the model');
  await start();
});
