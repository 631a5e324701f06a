// Models served through an OpenAI-compatible upstream (config `upstreams`): the cloud posture routing one model to
// the daemon's own device-posture instance running the real llama.cpp engine, and another to a small local server
// that misbehaves on request (refusals, failures, a stream cut short, a server too slow to answer), all over
// loopback. The pipeline runs in front of the upstream exactly as for a local model: auth, limits, scrubbing before
// the upstream sees anything, audit; the upstream's own errors, names and ids never reach the client.
import http from 'node:http';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { Agent, fetch as undiciFetch } from 'undici';
import { speech } from './fixtures/audio.js';
import { makeModelFixtures } from './fixtures/models.js';
import { tinyWhisperEntry, writeTinyWhisperModel } from './fixtures/whisper.js';
import { cli, createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const NATIONAL_ID = '1000000008';
const IBAN = 'SA03 8000 0000 6080 1016 7519';

// --- a misbehaving OpenAI-shaped server; it keeps every body it receives ---
const received: Array<Record<string, any>> = [];
/** For each 'slow' call: how long after it arrived its connection closed unanswered (the daemon gave up on it). */
const slowCancelledAfter: number[] = [];
const fake = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          object: 'list',
          data: ['fake-model', 'fake-embedder'].map((id) => ({ id, object: 'model', created: 1, owned_by: 'x' })),
        }),
      );
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, any>;
    received.push({ ...body, path: req.url, authorization: req.headers.authorization });
    if (req.url === '/v1/embeddings') {
      // Four dimensions per input, the first holding the input's length: enough to tell inputs apart.
      const inputs: string[] = body.input;
      const data = inputs.map((input, index) => {
        const v = Float32Array.of(input.length, 1, 2, 3);
        return { object: 'embedding', index, embedding: Buffer.from(v.buffer).toString('base64') };
      });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data, model: 'fake-embedder', usage: { prompt_tokens: 5, total_tokens: 5 } }));
      return;
    }
    const last: string = body.messages.at(-1).content;
    const error = (status: number, message: string, headers: Record<string, string> = {}) => {
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } }));
    };
    if (last === 'refuse') return error(400, `max_tokens is too large for model fake-model at 10.9.8.7`);
    if (last === 'crash') return error(500, 'Traceback (most recent call last): File "/srv/vllm/engine.py"');
    if (last === 'busy') return error(429, 'queue full', { 'retry-after': '7' });
    if (last === 'slow') {
      const arrived = Date.now();
      res.on('close', () => {
        if (!res.writableEnded) slowCancelledAfter.push(Date.now() - arrived);
      });
      setTimeout(() => error(500, 'too late'), 3000);
      return;
    }
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: 'upstream-id-1', object: 'chat.completion.chunk', created: 1, model: 'fake-model', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    if (!body.stream || last === 'whole') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'upstream-id-1',
          object: 'chat.completion',
          created: 1,
          model: 'fake-model',
          choices: [{ index: 0, message: { role: 'assistant', content: `echo: ${last}` }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 },
        }),
      );
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    if (last === 'cut') {
      res.write(chunk({ role: 'assistant', content: '' }));
      res.write(chunk({ content: 'half an ans' }));
      setTimeout(() => res.socket?.destroy(), 50);
      return;
    }
    if (last === 'stall') {
      // Two pieces, then silence past the upstream's timeoutMs (1 s here); the connection stays open.
      res.write(chunk({ role: 'assistant', content: '' }));
      res.write(chunk({ content: 'the first words ' }));
      setTimeout(() => res.socket?.destroy(), 5000);
      return;
    }
    if (last === 'trickle') {
      // Slow but steady: a piece every 300 ms (each gap under timeoutMs), with the time it was sent.
      let i = 0;
      const timer = setInterval(() => {
        if (i < 5) {
          res.write(chunk({ content: `<${Date.now()}> ` }));
          i++;
          return;
        }
        clearInterval(timer);
        res.write(chunk({}, 'stop'));
        res.end('data: [DONE]\n\n');
      }, 300);
      return;
    }
    if (last === 'tools') {
      res.write(
        chunk({
          role: 'assistant',
          tool_calls: [{ index: 0, id: 'call_up', type: 'function', function: { name: 'transfer', arguments: '' } }],
        }),
      );
      res.write(chunk({ tool_calls: [{ index: 0, function: { arguments: `{"iban":"${IBAN.slice(0, 12)}` } }] }));
      res.write(chunk({ tool_calls: [{ index: 0, function: { arguments: `${IBAN.slice(12)}"}` } }] }));
      res.write(chunk({}, 'tool_calls'));
      res.end('data: [DONE]\n\n');
      return;
    }
    if (last === 'long tool call') {
      // Arguments far past a socket's high-water mark, all in the last events before [DONE].
      res.write(chunk({ role: 'assistant', content: '' }));
      const args = JSON.stringify({ note: 'x'.repeat(300_000) });
      res.write(chunk({ tool_calls: [{ index: 0, id: 'call_long', type: 'function', function: { name: 'note', arguments: args } }] }));
      res.write(chunk({}, 'tool_calls'));
      res.end('data: [DONE]\n\n');
      return;
    }
    // The answer repeats what it was sent, cut across the value, so answer scrubbing has something to catch.
    const text = `echo: ${last} and my own ${NATIONAL_ID}`;
    res.write(chunk({ role: 'assistant', content: '' }));
    for (let i = 0; i < text.length; i += 7) res.write(chunk({ content: text.slice(i, i + 7) }));
    res.write(chunk({}, 'stop'));
    if (body.stream_options?.include_usage) {
      res.write(
        `data: ${JSON.stringify({ id: 'upstream-id-1', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 13, completion_tokens: 9, total_tokens: 22 } })}\n\n`,
      );
    }
    res.end('data: [DONE]\n\n');
  });
});
await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
t.teardown(() => fake.close());
const fakeBase = `http://127.0.0.1:${(fake.address() as { port: number }).port}/v1`;

// --- the device-posture daemon with the real engine, as the GPU rack stand-in ---
const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
// The rack serves the fixtures' chat and embeddings models and a tiny whisper model.
const whisper = writeTinyWhisperModel(join(fixtures.modelsDir, 'tiny-whisper.bin'));
const rackManifest = join(dir, 'rack-manifest.json');
writeFileSync(
  rackManifest,
  JSON.stringify({
    models: [...JSON.parse(readFileSync(fixtures.manifest, 'utf8')).models, tinyWhisperEntry('tiny-whisper.bin', whisper)],
  }),
);
const rackData = join(dir, 'rack');
const rackKey = createKey(rackData);
const rack = await startDaemon(t, ['--data-dir', rackData, '--models-dir', fixtures.modelsDir, '--manifest', rackManifest]);
await waitForModels(rack.baseURL, rackKey.secret, ['tiny-chat', 'tiny-embed', 'tiny-whisper'], 60_000);
const rackClient = new OpenAI({ apiKey: rackKey.secret, baseURL: rack.baseURL, maxRetries: 0 });
const rackKeyFile = join(dir, 'rack.key');
writeFileSync(rackKeyFile, `${rackKey.secret}\n`, { mode: 0o600 });

// A port nothing listens on: an upstream that is down.
const closed = http.createServer();
await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
const downBase = `http://127.0.0.1:${(closed.address() as { port: number }).port}/v1`;
await new Promise<void>((resolve) => closed.close(() => resolve()));

// --- the cloud daemon routing to them ---
const cloudData = join(dir, 'cloud');
const tls = selfSignedCert(dir);
const config = join(dir, 'cloud.json');
writeFileSync(
  config,
  JSON.stringify({
    posture: 'cloud',
    region: 'sa-riyadh-1',
    listen: { host: '127.0.0.1', port: 0 },
    tls: { cert: tls.cert, key: tls.key },
    dataDir: cloudData,
    manifest: fixtures.manifest,
    modelsDir: join(dir, 'no-models'),
    upstreams: [
      {
        name: 'rack',
        baseUrl: rack.baseURL,
        apiKeyFile: rackKeyFile,
        models: [
          { id: 'rack-chat', upstreamModel: 'tiny-chat', capability: 'chat', contextTokens: 1024, ownedBy: 'our-gpu-rack' },
          { id: 'rack-embed', upstreamModel: 'tiny-embed', capability: 'embeddings' },
          { id: 'rack-whisper', upstreamModel: 'tiny-whisper', capability: 'transcription' },
        ],
      },
      {
        name: 'fake',
        baseUrl: fakeBase,
        timeoutMs: 1000,
        models: [
          { id: 'fake-chat', upstreamModel: 'fake-model', capability: 'chat' },
          { id: 'fake-embed', upstreamModel: 'fake-embedder', capability: 'embeddings', shortenable: true },
        ],
      },
      { name: 'down', baseUrl: downBase, models: [{ id: 'down-chat', capability: 'chat' }] },
    ],
  }),
);
const cloudKey = createKey(cloudData, 'acme', ['--config', config]);
const cloud = await startDaemon(t, ['--config', config]);
const agent = new Agent({ connect: { ca: tls.ca } });
t.teardown(() => agent.close());
/**
 * fetch that trusts the test's certificate (undici's, with its own agent). Node's FormData is encoded here, by Node's
 * Response, because undici's fetch takes only its own; the SDK's check for FormData support gets Node's fetch.
 */
const fetchTrusting = (async (url: string, init: RequestInit = {}) => {
  if (url.startsWith('data:')) return fetch(url);
  let body = init.body;
  const headers = Object.fromEntries(new Headers(init.headers));
  if (body instanceof FormData) {
    const encoded = new Response(body);
    headers['content-type'] = encoded.headers.get('content-type')!;
    body = Buffer.from(await encoded.arrayBuffer());
  }
  return undiciFetch(url, { ...(init as object), headers, body, dispatcher: agent });
}) as unknown as typeof fetch;
const client = new OpenAI({
  apiKey: cloudKey.secret,
  baseURL: cloud.baseURL,
  maxRetries: 0,
  fetch: fetchTrusting,
});
const auth = { authorization: `Bearer ${cloudKey.secret}`, 'content-type': 'application/json' };
const listedIds = async () => (await client.models.list()).data.map((m) => m.id).sort();
// Upstream models are listed once their upstream's first health check (and, for embeddings, a test call) answers.
const upstreamIds = ['fake-chat', 'fake-embed', 'rack-chat', 'rack-embed', 'rack-whisper'];
for (const until = Date.now() + 20_000; (await listedIds()).length < upstreamIds.length && Date.now() < until;) {
  await new Promise((resolve) => setTimeout(resolve, 100));
}

t.test('upstream models are listed while their upstream serves them, with their owner; health names the upstream', async (t) => {
  const models = await client.models.list();
  const byId = Object.fromEntries(models.data.map((m) => [m.id, m]));
  t.same(Object.keys(byId).sort(), upstreamIds, 'the upstream that does not answer has its model withheld');
  t.equal(byId['rack-chat'].owned_by, 'our-gpu-rack');
  t.equal(byId['fake-chat'].owned_by, 'fake', 'owned_by defaults to the upstream name');
  const health = await request(`${cloud.baseURL}/health`, { headers: auth, ca: tls.ca });
  const byHealth = Object.fromEntries(health.json.models.map((m: { id: string }) => [m.id, m]));
  t.match(byHealth['rack-chat'], { capability: 'chat', readiness: 'ready', upstream: 'rack', busy: 0, waiting: 0 });
  t.match(byHealth['rack-embed'], { capability: 'embeddings', readiness: 'ready', upstream: 'rack' });
  t.match(byHealth['rack-whisper'], { capability: 'transcription', readiness: 'ready', upstream: 'rack' });
  t.match(byHealth['down-chat'], {
    readiness: 'failed',
    upstream: 'down',
    detail: /upstream 'down': it is not answering \(ECONNREFUSED\)/,
  });
  t.notMatch(byHealth['down-chat'].detail, /127\.0\.0\.1/, 'no address in health');
  t.equal(health.json.status, 'degraded', 'an upstream down makes the daemon degraded');
});

t.test('chat through an upstream running the real engine: buffered and streamed, scrubbed before it leaves', async (t) => {
  const rackAuditBefore = (await request(`${rack.baseURL}/health`, { headers: { authorization: `Bearer ${rackKey.secret}` } })).json.audit
    .entries;
  // The same call both ways: the same seed gives the same text.
  const params = {
    model: 'rack-chat',
    messages: [{ role: 'user' as const, content: `رقم هويتي ${NATIONAL_ID}، حسابي ${IBAN}` }],
    max_tokens: 8,
    temperature: 0,
    seed: 1,
  };
  const buffered = await client.chat.completions.create(params);
  t.equal(buffered.object, 'chat.completion');
  t.equal(buffered.model, 'rack-chat', 'our model id, not the upstream’s');
  t.match(buffered.id, /^chatcmpl-req_/, 'our request id');
  t.ok(buffered.usage!.prompt_tokens > 0 && buffered.usage!.completion_tokens <= 8, 'usage from the upstream');
  t.equal(buffered.usage!.total_tokens, buffered.usage!.prompt_tokens + buffered.usage!.completion_tokens);

  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    t.equal(chunk.model, 'rack-chat');
    text += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  t.equal(text, buffered.choices[0].message.content, 'the stream carries the same text as the buffered call');
  t.ok(finish === 'stop' || finish === 'length');
  t.ok(usage && usage.completion_tokens > 0, 'usage chunk passed on');

  // The upstream daemon audited both calls (what it was sent is checked against the other upstream below).
  const rackHealth = await request(`${rack.baseURL}/health`, { headers: { authorization: `Bearer ${rackKey.secret}` } });
  t.ok(rackHealth.json.audit.entries >= rackAuditBefore + 2, 'the upstream saw and audited the calls');
});

t.test('text completions and the Responses API through an upstream running the real engine', async (t) => {
  const prompt = `حسابي ${IBAN}:`;
  const through = await client.completions.create({ model: 'rack-chat', prompt, max_tokens: 6, temperature: 0, echo: true });
  const direct = await rackClient.completions.create({ model: 'tiny-chat', prompt: 'حسابي [IBAN]:', max_tokens: 6, temperature: 0 });
  t.equal(through.model, 'rack-chat');
  t.match(through.id, /^cmpl-req_/);
  t.equal(through.choices[0].text, `حسابي [IBAN]:${direct.choices[0].text}`, "the rack's text for the scrubbed prompt");
  t.equal(through.usage!.completion_tokens, direct.usage!.completion_tokens, 'usage from the upstream');
  let streamed = '';
  for await (const chunk of await client.completions.create({ model: 'rack-chat', prompt, max_tokens: 6, temperature: 0, stream: true }))
    streamed += chunk.choices[0]?.text ?? '';
  t.equal(streamed, direct.choices[0].text);

  const response = await client.responses.create({ model: 'rack-chat', input: 'Hello', max_output_tokens: 6, temperature: 0 });
  const chat = await rackClient.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 6,
    temperature: 0,
  });
  t.equal(response.output_text, chat.choices[0].message.content, 'a response is the rack’s chat answer');
});

t.test('embeddings through an upstream running the real engine: the same vectors, scrubbed before they leave', async (t) => {
  const input = ['صباح الخير', 'good morning'];
  const through = await client.embeddings.create({ model: 'rack-embed', input });
  const direct = await rackClient.embeddings.create({ model: 'tiny-embed', input });
  t.equal(through.model, 'rack-embed', 'our model id');
  t.equal(through.data.length, 2);
  for (const i of [0, 1]) {
    t.equal(through.data[i].index, i);
    t.same(
      through.data[i].embedding.map((v) => v.toFixed(5)),
      direct.data[i].embedding.map((v) => v.toFixed(5)),
      `input ${i}: the rack's own vector`,
    );
  }
  t.ok(through.usage.prompt_tokens > 0, 'usage from the upstream');
  // The rack's model is not Matryoshka-trained (shortenable is not set): asking for fewer dimensions is refused here,
  // before anything leaves.
  const width = direct.data[0].embedding.length;
  const refused = await client.embeddings.create({ model: 'rack-embed', input: 'x', dimensions: width - 1 }).catch((e) => e);
  t.equal(refused.status, 400);
  t.equal(refused.error.param, 'dimensions');
  t.match(refused.message, new RegExp(`only returns ${width} dimensions`));

  received.length = 0;
  const scrubbed = await client.embeddings.create({ model: 'fake-embed', input: [`IBAN ${IBAN}`, `id ${NATIONAL_ID}`], dimensions: 2 });
  t.same(received[0].input, ['IBAN [IBAN]', 'id [NATIONAL_ID]'], 'the upstream saw placeholders only');
  t.equal(received[0].model, 'fake-embedder');
  t.equal(scrubbed.data[0].embedding.length, 2, 'a shortenable model is cut to the dimensions asked for');
  const [a, b] = scrubbed.data[0].embedding;
  t.ok(Math.abs(Math.hypot(a, b) - 1) < 1e-6, 'and re-normalised');
  t.equal(scrubbed.usage.prompt_tokens, 5);
});

t.test('transcription through an upstream running the real engine', async (t) => {
  const clip = speech(dir, 'The branch opens at eight in the morning.', 'en');
  const file = () => toFile(readFileSync(clip), 'clip.wav');
  const through = await client.audio.transcriptions.create({
    file: await file(),
    model: 'rack-whisper',
    language: 'en',
    response_format: 'verbose_json',
  });
  const direct = await rackClient.audio.transcriptions.create({
    file: await file(),
    model: 'tiny-whisper',
    language: 'en',
    response_format: 'verbose_json',
  });
  t.equal(through.language, 'english');
  t.equal(through.text, direct.text, "the rack's own transcript");
  t.ok(through.text.length > 0);
  t.ok(Math.abs(through.duration - direct.duration) < 0.1, `duration ${through.duration} s`);
  t.same(
    through.segments!.map((s) => [s.start, s.end, s.text]),
    direct.segments!.map((s) => [s.start, s.end, s.text]),
    'the same segments, with their times',
  );
  const srt = await client.audio.transcriptions.create({
    file: await file(),
    model: 'rack-whisper',
    language: 'en',
    response_format: 'srt',
  });
  t.match(srt, /^1\n00:00:00,000 --> /, "our formats from the upstream's segments");
});

t.test('what the upstream is sent: scrubbed messages, its own model name, its own key, never ours', async (t) => {
  received.length = 0;
  const r = await client.chat.completions.create({
    model: 'fake-chat',
    messages: [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: `my id is ${NATIONAL_ID} and IBAN ${IBAN}` },
    ],
    max_tokens: 20,
  });
  t.equal(received.length, 1);
  const sent = received[0];
  t.equal(sent.model, 'fake-model');
  t.equal(sent.max_tokens, 20);
  t.equal(sent.messages[1].content, 'my id is [NATIONAL_ID] and IBAN [IBAN]');
  t.equal(sent.authorization, undefined, 'no key configured, none sent; the client’s key is never forwarded');
  t.equal(r.choices[0].message.content, 'echo: my id is [NATIONAL_ID] and IBAN [IBAN]');
  t.same(r.usage, { prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 });
  t.equal(r.id.startsWith('chatcmpl-req_'), true, 'the upstream’s id is not passed on');
});

t.test('a streamed answer is scrubbed on the way back, even across pieces; tool calls are assembled', async (t) => {
  const stream = await client.chat.completions.create({
    model: 'fake-chat',
    messages: [{ role: 'user', content: 'hello' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    usage = chunk.usage ?? usage;
  }
  t.equal(text, 'echo: hello and my own [NATIONAL_ID]');
  t.same(usage, { prompt_tokens: 13, completion_tokens: 9, total_tokens: 22 });

  const tools = await client.chat.completions.create({
    model: 'fake-chat',
    messages: [{ role: 'user', content: 'tools' }],
    tools: [{ type: 'function', function: { name: 'transfer', parameters: { type: 'object' } } }],
    stream: true,
  });
  const calls: Array<{ id?: string; name?: string; args: string }> = [];
  let finish: string | null = null;
  for await (const chunk of tools) {
    for (const c of chunk.choices[0]?.delta.tool_calls ?? []) {
      calls[c.index] ??= { args: '' };
      if (c.id) calls[c.index].id = c.id;
      if (c.function?.name) calls[c.index].name = c.function.name;
      calls[c.index].args += c.function?.arguments ?? '';
    }
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  t.equal(finish, 'tool_calls');

  t.same(calls, [{ id: 'call_up', name: 'transfer', args: '{"iban":"[IBAN]"}' }], 'arguments assembled, then scrubbed');
  t.same(received.at(-1)!.tools, [{ type: 'function', function: { name: 'transfer', parameters: { type: 'object' } } }]);

  // An upstream that answers a stream request in one JSON piece is still streamed to the client.
  const whole = await client.chat.completions.create({ model: 'fake-chat', messages: [{ role: 'user', content: 'whole' }], stream: true });
  let wholeText = '';
  for await (const chunk of whole) wholeText += chunk.choices[0]?.delta.content ?? '';
  t.equal(wholeText, 'echo: whole');
});

// A corked response would wait forever for a drain; a hang fails here within the timeout, not at the file's.
t.test(
  'the last events before [DONE] can be far larger than a socket takes without waiting for a drain',
  { timeout: 60_000 },
  async (t) => {
    const long = await client.chat.completions.create({
      model: 'fake-chat',
      messages: [{ role: 'user', content: 'long tool call' }],
      tools: [{ type: 'function', function: { name: 'note', parameters: { type: 'object' } } }],
      stream: true,
    });
    let longArgs = '';
    let longFinish: string | null = null;
    for await (const chunk of long) {
      for (const c of chunk.choices[0]?.delta.tool_calls ?? []) longArgs += c.function?.arguments ?? '';
      longFinish = chunk.choices[0]?.finish_reason ?? longFinish;
    }
    t.equal(longFinish, 'tool_calls');
    t.equal(longArgs, JSON.stringify({ note: 'x'.repeat(300_000) }), 'all 300,000 characters arrive');
  },
);

t.test('upstream failures map to our errors and never show the upstream’s details', async (t) => {
  const call = (content: string) =>
    client.chat.completions.create({ model: 'fake-chat', messages: [{ role: 'user', content }] }).catch((e) => e);

  const refused = await call('refuse');
  t.equal(refused.status, 400);
  t.equal(refused.error.type, 'invalid_request_error');
  t.match(refused.message, /'fake-chat' refused the request as invalid: max_tokens is too large for model fake-chat/);
  t.notMatch(refused.message, /fake-model/, 'the upstream’s model name is replaced by ours');
  t.match(refused.message, /fake-chat at \[address\]/, 'and the address it names is removed');

  const crashed = await call('crash');
  t.equal(crashed.status, 500);
  t.equal(crashed.code, 'internal_error');
  t.notMatch(crashed.message, /Traceback|vllm/, 'no upstream internals');

  const busy = await call('busy');
  t.equal(busy.status, 503);
  t.equal(busy.code, 'server_overloaded');
  t.equal(busy.headers.get('retry-after'), '7', 'the upstream’s Retry-After is passed on');

  const slow = await call('slow');
  t.equal(slow.status, 503, 'an upstream that does not start answering within timeoutMs');
  t.equal(slow.code, 'server_overloaded');

  const down = await client.chat.completions.create({ model: 'down-chat', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
  t.equal(down.status, 503);
  t.equal(down.code, 'model_not_ready');
  t.ok(down.headers.get('retry-after'));

  // A stream cut in the middle: what was sent stays sent, then an error event and [DONE]; the call is audited.
  const cut = await request(`${cloud.baseURL}/chat/completions`, {
    method: 'POST',
    headers: auth,
    ca: tls.ca,
    body: JSON.stringify({ model: 'fake-chat', stream: true, messages: [{ role: 'user', content: 'cut' }] }),
  });
  t.equal(cut.status, 200);
  // The answer's last characters ("s") are held back by answer scrubbing until the next piece settles them; the
  // piece never comes, so they are dropped with the rest.
  t.match(cut.text, /"content":"half an an"/);
  t.match(cut.text, /"code":"internal_error"/);
  t.match(cut.text, /: x-audit-leaf \d+\n\ndata: \[DONE\]\n\n$/);

  // Every failure above was audited with its status.
  for (const r of [refused, crashed, busy, slow, down]) t.ok(r.headers.get('x-audit-leaf'), `${r.status} has an audit leaf`);
});

t.test('slow streams: a steady one is passed on piece by piece; one that goes silent ends with an error', async (t) => {
  const stream = await client.chat.completions.create({
    model: 'fake-chat',
    stream: true,
    messages: [{ role: 'user', content: 'trickle' }],
  });
  const lags: number[] = [];
  let text = '';
  for await (const chunk of stream) {
    const piece = chunk.choices[0]?.delta.content ?? '';
    text += piece;
    const sent = /<(\d+)>/.exec(piece);
    if (sent) lags.push(Date.now() - Number(sent[1]));
  }
  t.equal((text.match(/<\d+>/g) ?? []).length, 5, 'every piece arrived');
  t.ok(
    lags.length >= 4 && lags.every((lag) => lag < 250),
    `each piece reached the client soon after the upstream sent it (lags ${lags.join(', ')} ms), not at the end`,
  );

  const started = Date.now();
  const stalled = await request(`${cloud.baseURL}/chat/completions`, {
    method: 'POST',
    headers: auth,
    ca: tls.ca,
    body: JSON.stringify({ model: 'fake-chat', stream: true, messages: [{ role: 'user', content: 'stall' }] }),
  });
  const waited = Date.now() - started;
  t.equal(stalled.status, 200);
  t.match(stalled.text, /"content":"the first words "/, 'what was sent stays sent');
  t.match(stalled.text, /"code":"internal_error"/, 'then an error event');
  t.match(stalled.text, /data: \[DONE\]\n\n$/);
  t.ok(waited >= 900 && waited < 4000, `ended by the upstream's timeoutMs (1 s), not by the upstream (${waited} ms)`);
});

t.test('a client that gives up before its answer is logged as gone, not as a failure of the daemon', async (t) => {
  const before = cloud.logs.length;
  const cancelledBefore = slowCancelledAfter.length;
  const gaveUp = await client.chat.completions
    .create({ model: 'fake-chat', messages: [{ role: 'user', content: 'slow' }] }, { signal: AbortSignal.timeout(200) })
    .catch((e) => e);
  t.type(gaveUp, OpenAI.APIUserAbortError, 'the client aborted');
  await new Promise((resolve) => setTimeout(resolve, 500));
  const lines = cloud.logs.slice(before).join('\n');
  t.match(lines, /the client closed the connection before its answer/);
  t.notMatch(lines, /unhandled error|request failed|"level":50/, 'no error logged for it');
  // The upstream hears of it at once, not when its own timeout (1 s here) would have ended the call.
  const cancelled = slowCancelledAfter.slice(cancelledBefore);
  t.equal(cancelled.length, 1, 'the upstream call was cancelled');
  t.ok(cancelled[0] < 800, `the upstream's connection closed ${cancelled[0]} ms after the call reached it`);
});

t.test('config: sealed postures accept loopback upstreams only; names and ids must be unique; no credentials in URLs', async (t) => {
  const check = (upstreams: unknown[], posture = 'device') => {
    const file = join(dir, `check-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(
      file,
      JSON.stringify({
        posture,
        upstreams,
        ...(posture === 'device' ? {} : { listen: { host: '127.0.0.1' }, tls: { cert: tls.cert, key: tls.key } }),
      }),
    );
    return cli(['config', 'check', '--config', file]);
  };
  const model = [{ id: 'm', capability: 'chat' }];
  t.equal(check([{ name: 'a', baseUrl: 'http://127.0.0.1:9000/v1', models: model }]).code, 0, 'loopback on device');
  t.equal(check([{ name: 'a', baseUrl: 'http://[::1]:9000/v1', models: model }]).code, 0, 'IPv6 loopback on device');
  const sealed = check([{ name: 'a', baseUrl: 'http://203.0.113.5:8000/v1', models: model }], 'device');
  t.equal(sealed.code, 1);
  t.match(sealed.stderr + sealed.stdout, /points at '203\.0\.113\.5', but the device posture is sealed/);
  t.equal(check([{ name: 'a', baseUrl: 'http://10.0.0.5:8000/v1', models: model }], 'cloud').code, 0, 'any address on cloud');
  const duplicate = check([
    { name: 'a', baseUrl: 'http://127.0.0.1:1/v1', models: model },
    { name: 'a', baseUrl: 'http://127.0.0.1:2/v1', models: model },
  ]);
  t.match(duplicate.stderr + duplicate.stdout, /names must differ[\s\S]*ids must differ/);
  const credentials = check([{ name: 'a', baseUrl: 'http://user:secret@127.0.0.1:1/v1', models: model }]);
  t.match(credentials.stderr + credentials.stdout, /holds credentials: put the key in a file/);
  t.notMatch(credentials.stderr + credentials.stdout, /secret@/, 'the credential is not echoed back');
  const missingKey = check([{ name: 'a', baseUrl: 'http://127.0.0.1:1/v1', apiKeyFile: '/nonexistent/key', models: model }]);
  t.match(missingKey.stdout, /'upstreams\[0\]\.apiKeyFile' names '\/nonexistent\/key', which does not exist/);
  const unknownCapability = check([{ name: 'a', baseUrl: 'http://127.0.0.1:1/v1', models: [{ id: 'm', capability: 'video' }] }]);
  t.equal(unknownCapability.code, 1);
});

t.test('an upstream model id that the manifest also lists is refused at start', async (t) => {
  const file = join(dir, 'clash.json');
  writeFileSync(
    file,
    JSON.stringify({
      dataDir: join(dir, 'clash'),
      manifest: fixtures.manifest,
      upstreams: [{ name: 'a', baseUrl: 'http://127.0.0.1:1/v1', models: [{ id: 'tiny-chat', capability: 'chat' }] }],
    }),
  );
  const r = cli(['serve', '--config', file, '--port', '0']);
  t.equal(r.code, 1);
  t.match(r.stderr + r.stdout, /routes 'tiny-chat', which models-manifest\.json also lists/);
});
