// The /v1 surface through the official OpenAI client (base URL changed, nothing else) and raw HTTP for headers.
import t from 'tap';
import OpenAI from 'openai';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { ID_HEADERS, request } from './helpers/http.js';

const dataDir = tempDir(t);
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--region', 'sa-riyadh-1']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });

t.test('models.list works through the SDK and carries our headers', async (t) => {
  const { data, response } = await client.models.list().withResponse();
  t.same(data.data, [], 'no engine serves a model yet');
  t.equal(response.headers.get('x-region'), 'sa-riyadh-1');
  t.equal(response.headers.get('x-sovereign'), 'true');
  t.match(response.headers.get('x-request-id'), /^req_[0-9a-f]{32}$/);
  t.notOk(response.headers.get('x-ratelimit-limit-requests'), 'the device posture does not meter');
});

t.test('every response has a request id of its own, across refills of the random pool', async (t) => {
  // The ids come from a pool of 256: 600 calls draw it twice and then some.
  const ids = new Set<string>();
  for (let i = 0; i < 600; i++) ids.add(String((await request(`${daemon.origin}/healthz`)).headers['x-request-id']));
  t.same(
    [...ids].filter((id) => !/^req_[0-9a-f]{32}$/.test(id)),
    [],
    'each is req_ and 32 hex digits',
  );
  t.equal(ids.size, 600, 'no id repeats');
});

t.test('health reports posture, region and sovereignty', async (t) => {
  const r = await request(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` } });
  t.equal(r.status, 200);
  t.match(r.json, { status: 'ok', posture: 'device', region: 'sa-riyadh-1', sovereign: true, models: [] });
});

t.test('healthz needs no key and says only whether the process is alive', async (t) => {
  const r = await request(`${daemon.origin}/healthz`);
  t.equal(r.status, 200);
  t.same(r.json, { status: 'alive' });
  for (const h of ID_HEADERS) t.ok(r.headers[h], `${h} on /healthz`);
});

t.test('request ids are unique per call', async (t) => {
  const ids = new Set<string>();
  for (let i = 0; i < 20; i++) ids.add(String((await request(`${daemon.origin}/healthz`)).headers['x-request-id']));
  t.equal(ids.size, 20);
});

t.test('a chat call naming a model that is not served is a 404 model_not_found', async (t) => {
  const err = await client.chat.completions
    .create({ model: 'qwen2.5-7b-instruct', messages: [{ role: 'user', content: 'hi' }] })
    .catch((e) => e);
  t.ok(err instanceof OpenAI.NotFoundError, 'the SDK sees a 404');
  t.equal(err.code, 'model_not_found');
  t.equal(err.param, 'model');
  t.match(err.headers.get('x-request-id'), /^req_/);
  t.equal(err.headers.get('x-region'), 'sa-riyadh-1');
});

t.test('embeddings of a model that is not served is a 404 model_not_found', async (t) => {
  const err = await client.embeddings.create({ model: 'bge-m3', input: 'hello' }).catch((e) => e);
  t.ok(err instanceof OpenAI.NotFoundError);
  t.equal(err.code, 'model_not_found');
});

t.test('validation errors from the schema are 400 in OpenAI shape, naming the parameter', async (t) => {
  const err = await client.chat.completions.create({ model: 'm', messages: [{ role: 'wizard' as 'user', content: 'hi' }] }).catch((e) => e);
  t.ok(err instanceof OpenAI.BadRequestError);
  t.equal(err.code, 'invalid_request_error');
  t.equal(err.type, 'invalid_request_error');
  t.equal(err.param, 'messages[0].role');
  t.match(err.message, /must be one of/);
});
