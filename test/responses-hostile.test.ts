// The Responses API as a hostile or careless client meets it, on the real llama.cpp engine with a tiny random-weight
// model: what a stored response keeps of fields no model reads, strict tools cut off by the length limit, the fields a
// refusal names, and paging through input items as the client libraries ask for it.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI from 'openai';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';
import { estimateTokens } from '../daemon/http/routes/responses-input.js';

const ID = '1000000008';
const IBAN = 'SA03 8000 0000 6080 1016 7519';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = `${dir}/data`;
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-chat']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });

const post = async (path: string, body: unknown) => {
  const res = await fetch(`${daemon.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
};

const onDisk = (value: string) =>
  readdirSync(dataDir)
    .filter((f) => f.startsWith('sovereign.mdb'))
    .some((f) => readFileSync(join(dataDir, f)).includes(value));

t.test("a stored response keeps only scrubbed text: text.format's name and description, and no unknown fields", async (t) => {
  const body = {
    model: 'tiny-chat',
    input: 'hi',
    max_output_tokens: 2,
    text: {
      format: {
        type: 'json_schema',
        name: `person_${ID}`,
        description: `The customer with IBAN ${IBAN}`,
        schema: { type: 'object', properties: { name: { type: 'string' } } },
        note: `national ID ${ID}`,
      },
    },
    tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object', properties: {} }, strict: false }],
    tool_choice: { type: 'function', name: 'lookup', note: `card of ${ID}` },
  };
  const created = await post('/responses', body);
  t.equal(created.status, 200, created.text);
  const response = JSON.parse(created.text) as { id: string; text: unknown; tool_choice: unknown };
  t.same(response.text, {
    format: {
      type: 'json_schema',
      name: 'person_[NATIONAL_ID]',
      description: 'The customer with IBAN [IBAN]',
      schema: { type: 'object', properties: { name: { type: 'string' } } },
      strict: null,
    },
  });
  t.same(response.tool_choice, { type: 'function', name: 'lookup' });
  const stored = JSON.stringify(await client.responses.retrieve(response.id));
  t.notOk(stored.includes(ID) || stored.includes('6080 1016 7519'), stored);
  t.notOk(onDisk(ID) || onDisk('6080 1016 7519'), 'no raw value in the data directory');

  const streamed = await post('/responses', { ...body, stream: true });
  t.notOk(streamed.text.includes(ID) || streamed.text.includes('6080 1016 7519'), 'nor in the streamed events');
});

t.test("a strict tool's call cut off by the length limit is withheld, as a strict answer is", async (t) => {
  const parameters = {
    type: 'object',
    properties: { city: { enum: ['Riyadh', 'Jeddah'] } },
    required: ['city'],
    additionalProperties: false,
  };
  const tools = [{ type: 'function', name: 'forecast', parameters, strict: true }];
  const cut = await post('/responses', { model: 'tiny-chat', input: 'Weather?', tools, tool_choice: 'required', max_output_tokens: 2 });
  t.equal(cut.status, 400, cut.text);
  t.equal(JSON.parse(cut.text).error.param, 'max_output_tokens');

  const streamed = await post('/responses', {
    model: 'tiny-chat',
    input: 'Weather?',
    tools,
    tool_choice: 'required',
    max_output_tokens: 2,
    stream: true,
  });
  t.match(streamed.text, /event: error\ndata: \{[^\n]*"param":"max_output_tokens"/);
  t.match(streamed.text, /event: response\.failed\n/);
  t.notMatch(streamed.text, /response\.function_call_arguments/, 'no call is sent');

  const chat = await post('/chat/completions', {
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'Weather?' }],
    tools: [{ type: 'function', function: { name: 'forecast', parameters, strict: true } }],
    tool_choice: 'required',
    max_tokens: 2,
  });
  t.equal(chat.status, 400, chat.text);
  t.equal(JSON.parse(chat.text).error.param, 'max_tokens');

  // A tool that is not strict: the call comes back as far as it got, as OpenAI's does.
  const lenient = await post('/responses', {
    model: 'tiny-chat',
    input: 'Weather?',
    tools: [{ ...tools[0], strict: false }],
    tool_choice: 'required',
    max_output_tokens: 2,
  });
  t.equal(lenient.status, 200, lenient.text);
  t.equal(JSON.parse(lenient.text).status, 'incomplete');
});

t.test("input items are paged by 'limit' as the client sends it (in the query string)", async (t) => {
  const input = Array.from({ length: 7 }, (_, i) => ({ role: 'user' as const, content: `m${i}` }));
  const response = await client.responses.create({ model: 'tiny-chat', input, max_output_tokens: 1 });
  const first = await client.responses.inputItems.list(response.id, { limit: 3, order: 'asc' });
  const texts = (page: typeof first) => page.data.map((item) => (item as { content: Array<{ text: string }> }).content[0].text);
  t.same(texts(first), ['m0', 'm1', 'm2']);
  t.equal(first.has_more, true);
  const next = await client.responses.inputItems.list(response.id, { limit: 100, order: 'asc', after: first.data.at(-1)!.id });
  t.same(texts(next), ['m3', 'm4', 'm5', 'm6']);
  t.equal(next.has_more, false);
  for (const limit of ['0', '101', '1.5', 'x']) {
    const res = await fetch(`${daemon.baseURL}/responses/${response.id}/input_items?limit=${limit}`, {
      headers: { authorization: `Bearer ${key.secret}` },
    });
    t.equal(res.status, 400, `limit=${limit}`);
    t.equal(((await res.json()) as { error: { param: string } }).error.param, 'limit');
  }
});

t.test("a refusal names the Responses API's field, not the chat call's it became", async (t) => {
  const cases: Array<[string, Record<string, unknown>, string, RegExp]> = [
    ['too long for the context', { input: 'word '.repeat(3000) }, 'input', /context length/],
    [
      'a schema the grammar cannot enforce',
      { text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { a: { not: {} } } } } } },
      'text.format.schema',
      /'text\.format\.schema' cannot be enforced/,
    ],
    [
      "a tool's parameters the grammar cannot enforce",
      { tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: { a: { not: {} } } }, strict: false }] },
      'tools[0].parameters',
      /'tools\[0\]\.parameters' cannot be enforced/,
    ],
    [
      'function call arguments that are not JSON',
      {
        input: [
          { role: 'user', content: 'x' },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{not json' },
          { type: 'function_call_output', call_id: 'c1', output: 'o' },
        ],
      },
      'input[1].arguments',
      /not valid JSON/,
    ],
    [
      'the output of a call never made',
      {
        input: [
          { role: 'user', content: 'x' },
          { type: 'function_call_output', call_id: 'nobody', output: 'o' },
        ],
      },
      'input[1].call_id',
      /'nobody', which no function_call before it made/,
    ],
  ];
  for (const [what, extra, param, message] of cases) {
    const res = await post('/responses', { model: 'tiny-chat', input: 'x', max_output_tokens: 2, ...extra });
    t.equal(res.status, 400, `${what}: ${res.text}`);
    const error = (JSON.parse(res.text) as { error: { param: string; message: string } }).error;
    t.equal(error.param, param, what);
    t.match(error.message, message, what);
  }
  const streamed = await post('/responses', { model: 'tiny-chat', input: 'word '.repeat(3000), stream: true });
  t.equal(streamed.status, 400, 'refused before the stream begins');
  t.equal((JSON.parse(streamed.text) as { error: { param: string } }).error.param, 'input');
});

t.test('a $ref to a definition the schema does not have is refused before anything is generated', async (t) => {
  const schema = { type: 'object', properties: { a: { $ref: '#/$defs/missing' } }, $defs: { present: { type: 'string' } } };
  for (const strict of [true, false]) {
    const res = await post('/responses', {
      model: 'tiny-chat',
      input: 'x',
      max_output_tokens: 4,
      text: { format: { type: 'json_schema', name: 'x', schema, strict } },
    });
    t.equal(res.status, 400, res.text);
    const error = (JSON.parse(res.text) as { error: { param: string; message: string } }).error;
    t.equal(error.param, 'text.format.schema');
    t.match(error.message, /'#\/\$defs\/missing' \(at the root\.properties\.a\) names a definition the schema does not have/);
  }
  const chat = await post('/chat/completions', {
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
  });
  t.equal(chat.status, 400, chat.text);
  t.equal((JSON.parse(chat.text) as { error: { param: string } }).error.param, 'response_format.json_schema.schema');
});

t.test('a long id in the path meets the pipeline: 401 without a key, 400 with one, and an audit entry', async (t) => {
  const long = `resp_${'a'.repeat(300)}`;
  const anonymous = await fetch(`${daemon.baseURL}/responses/${long}`);
  t.equal(anonymous.status, 401, 'a key is asked for first');
  const known = await fetch(`${daemon.baseURL}/responses/${long}`, { headers: { authorization: `Bearer ${key.secret}` } });
  t.equal(known.status, 400);
  t.match(known.headers.get('x-audit-leaf'), /^\d+$/);
  t.notMatch(await known.text(), /a{100}/, 'the message does not repeat the path');
});

t.test("a call continuing a stored conversation reserves that conversation's tokens, not the model's whole context", async (t) => {
  const conversation = [
    { type: 'message', id: 'msg_1', role: 'user', content: [{ type: 'input_text', text: 'x'.repeat(1000) }] },
    { type: 'message', id: 'msg_2', role: 'assistant', content: [{ type: 'output_text', text: 'y'.repeat(500) }] },
  ];
  const stored = { conversation: (id: string) => (id === 'resp_1' ? conversation : null), item: () => null };
  const body = { model: 'm', input: 'and?', previous_response_id: 'resp_1', max_output_tokens: 10 };
  const estimate = estimateTokens(body, undefined, stored);
  t.ok(estimate >= 1000 + 500 + 4 + 10, `at least the conversation's bytes and the answer (${estimate})`);
  t.ok(estimate < 2000, `no more than a margin beyond them (${estimate})`);
  t.equal(estimateTokens(body, 800, stored), 800 + 10, "a model's context bounds it");
});
