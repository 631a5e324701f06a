// The frontier posture: a frontier provider (an OpenAI-compatible server outside the sovereign boundary; here a small
// local server standing in for it, over loopback) is labelled non-sovereign everywhere: every response's
// X-Sovereign header, its models' owned_by, health and the dashboard's model list. What goes to it and what comes back
// is always scrubbed (scrub.output cannot be turned off), knowledge bases never use its models unless named, and the
// audit entry of every call sent to it records that the call left the boundary.
import http from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { fetchTrusting, selfSignedCert } from './helpers/tls.js';

const NATIONAL_ID = '1000000008';
const IBAN = 'SA03 8000 0000 6080 1016 7519';

// --- the stand-in frontier provider; it keeps what it is sent ---
const received: Array<{ path: string; body: any }> = [];
const provider = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    if (req.method === 'GET') {
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'gpt-x' }, { id: 'embed-x' }] }));
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    received.push({ path: req.url!, body });
    if (req.url === '/v1/embeddings') {
      const data = (body.input as string[]).map((_, index) => ({ index, embedding: [0.6, 0.8] }));
      res.end(JSON.stringify({ object: 'list', data, usage: { prompt_tokens: 2, total_tokens: 2 } }));
      return;
    }
    // The provider's answer carries a national ID of its own: answer scrubbing must catch it.
    const answer = `noted; your reference is ${NATIONAL_ID}`;
    if (body.stream) {
      res.setHeader('content-type', 'text/event-stream');
      for (let i = 0; i < answer.length; i += 5) {
        res.write(
          `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: answer.slice(i, i + 5) }, finish_reason: null }] })}\n\n`,
        );
      }
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
      res.end('data: [DONE]\n\n');
      return;
    }
    res.end(
      JSON.stringify({
        choices: [{ index: 0, message: { role: 'assistant', content: answer }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 },
      }),
    );
  });
});
await new Promise<void>((resolve) => provider.listen(0, '127.0.0.1', resolve));
t.teardown(() => provider.close());
const providerBase = `http://127.0.0.1:${(provider.address() as { port: number }).port}/v1`;

const dir = tempDir(t);
const tls = selfSignedCert(dir);
const frontierConfig = (extra: Record<string, unknown> = {}, upstream: Record<string, unknown> = {}) => ({
  posture: 'frontier',
  region: 'sa-riyadh-1',
  listen: { host: '127.0.0.1', port: 0 },
  tls: { cert: tls.cert, key: tls.key },
  dataDir: join(dir, 'data'),
  modelsDir: join(dir, 'no-models'),
  audit: { signer: 'software', checkpointMs: 200 },
  upstreams: [
    {
      name: 'openai',
      baseUrl: providerBase,
      frontier: true,
      models: [
        { id: 'gpt-frontier', upstreamModel: 'gpt-x', capability: 'chat' },
        { id: 'frontier-embed', upstreamModel: 'embed-x', capability: 'embeddings' },
      ],
      ...upstream,
    },
  ],
  ...extra,
});
const config = join(dir, 'frontier.json');
writeFileSync(config, JSON.stringify(frontierConfig()));
const key = createKey(join(dir, 'data'), 'ministry', ['--config', config]);
const daemon = await startDaemon(t, ['--config', config]);
const fetchWithCa = fetchTrusting(t, tls.ca);
const client = new OpenAI({
  apiKey: key.secret,
  baseURL: daemon.baseURL,
  maxRetries: 0,
  fetch: fetchWithCa,
});
const auth = { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' };
const call = (path: string, body?: unknown, headers: Record<string, string> = auth) =>
  request(`${daemon.baseURL}${path}`, {
    method: body ? 'POST' : 'GET',
    headers,
    ca: tls.ca,
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
/** The audit entry of a leaf, once a checkpoint covers it (every 200 ms here). */
async function receipt(leaf: string | string[] | undefined): Promise<Record<string, unknown>> {
  for (const until = Date.now() + 10_000; ;) {
    const r = await call(`/audit/anchors?leaf=${String(leaf)}`);
    if (r.status === 200 || Date.now() > until) return r.json.entry;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// The upstream is listed once its health check answers (every 5 s; on a loaded machine the first may fail).
for (const until = Date.now() + 30_000; (await client.models.list()).data.length < 2 && Date.now() < until;) {
  await new Promise((resolve) => setTimeout(resolve, 100));
}

t.test('config: the frontier provider only on the frontier posture; answer scrubbing cannot be turned off', async (t) => {
  const check = (content: object) => {
    const file = join(dir, `check-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(file, JSON.stringify(content));
    return cli(['config', 'check', '--config', file]);
  };
  const off = check(frontierConfig({ scrub: { output: false } }));
  t.equal(off.code, 1);
  t.match(off.stdout + off.stderr, /'scrub.output' cannot be turned off on the frontier posture/);
  const onCloud = check(frontierConfig({ posture: 'cloud' }));
  t.equal(onCloud.code, 1);
  t.match(
    onCloud.stdout + onCloud.stderr,
    /'upstreams\[0\]\.frontier' is true, but a frontier provider may only be configured on the frontier posture \(this one is cloud\)/,
  );
  t.equal(check(frontierConfig()).code, 0);
  const env = cli(['config', 'check', '--config', config], { SOVEREIGN_SCRUB_OUTPUT: 'false' });
  t.equal(env.code, 1, 'nor through the environment');
});

t.test('labelled non-sovereign: every response header, the model list, health', async (t) => {
  const models = await call('/models');
  t.equal(models.headers['x-sovereign'], 'false');
  const byId = Object.fromEntries(models.json.data.map((m: { id: string; owned_by: string }) => [m.id, m.owned_by]));
  t.same(byId, { 'gpt-frontier': 'openai (non-sovereign)', 'frontier-embed': 'openai (non-sovereign)' });
  t.equal((await call('/nowhere')).headers['x-sovereign'], 'false', 'on a 404');
  t.equal((await call('/models', undefined, { authorization: 'Bearer sk-wrong' })).headers['x-sovereign'], 'false', 'on a 401');
  const stream = await call('/chat/completions', { model: 'gpt-frontier', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  t.equal(stream.headers['x-sovereign'], 'false', 'on a stream');

  const health = (await call('/health')).json;
  t.equal(health.sovereign, false);
  t.equal(health.posture, 'frontier');
  for (const id of ['gpt-frontier', 'frontier-embed']) {
    t.match(
      health.models.find((m: { id: string }) => m.id === id),
      { upstream: 'openai', sovereign: false, frontier: true, readiness: 'ready' },
      `${id} in health`,
    );
  }
});

t.test('scrubbed both ways, and the audit entry says the call left the boundary', async (t) => {
  received.length = 0;
  const r = await call('/chat/completions', {
    model: 'gpt-frontier',
    messages: [{ role: 'user', content: `my IBAN is ${IBAN}, id ${NATIONAL_ID}` }],
  });
  t.equal(r.status, 200);
  t.equal(received[0].body.messages[0].content, 'my IBAN is [IBAN], id [NATIONAL_ID]', 'the provider saw placeholders only');
  t.equal(r.json.choices[0].message.content, 'noted; your reference is [NATIONAL_ID]', "the provider's answer is scrubbed too");
  const entry = await receipt(r.headers['x-audit-leaf']);
  t.equal(entry.left_boundary, 'openai', 'the audit entry names the provider the call went to');
  t.same(entry.redactions, { NATIONAL_ID: 1, IBAN: 1, IQAMA: 0, CARD: 0 });

  const stream = await client.chat.completions.create({
    model: 'gpt-frontier',
    stream: true,
    messages: [{ role: 'user', content: 'hello' }],
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  t.equal(text, 'noted; your reference is [NATIONAL_ID]', 'a streamed answer too');

  const embedded = await call('/embeddings', { model: 'frontier-embed', input: `card 4111 1111 1111 1111` });
  t.equal(received.at(-1)!.body.input[0], 'card [CARD]');
  t.equal((await receipt(embedded.headers['x-audit-leaf'])).left_boundary, 'openai');

  const refused = await call('/chat/completions', { model: 'gpt-frontier', messages: 'not a list' });
  t.equal(refused.status, 400);
  const refusedEntry = await receipt(refused.headers['x-audit-leaf']);
  t.notOk('left_boundary' in refusedEntry, 'a call refused before it was sent did not leave');
});

t.test('knowledge bases stay inside unless a frontier model is named', async (t) => {
  received.length = 0;
  const ingested = await call('/documents', { knowledge_base: 'hr', content: 'Leave requests go to the HR office on the second floor.' });
  t.equal(ingested.status, 201);
  t.notOk('left_boundary' in (await receipt(ingested.headers['x-audit-leaf'])), 'ingested without the provider');
  const query = await call('/documents/query', { knowledge_base: 'hr', query: 'where do leave requests go?' });
  t.equal(query.status, 200);
  t.equal(query.json.answer, null, 'retrieval only: no sovereign chat model, and the frontier one is not used unasked');
  t.ok(query.json.retrieval.length > 0 || query.json.citations.length > 0, 'retrieval still works');
  t.equal(received.length, 0, 'nothing was sent to the provider');

  const named = await call('/documents/query', { knowledge_base: 'hr', query: 'where do leave requests go?', model: 'gpt-frontier' });
  t.equal(named.status, 200);
  t.equal(named.json.model, 'gpt-frontier');
  t.ok(
    received.some((r) => r.path === '/v1/chat/completions'),
    'the named frontier model answered',
  );
  t.equal((await receipt(named.headers['x-audit-leaf'])).left_boundary, 'openai');
});
