// Nothing a model is sent escapes scrubbing (SPEC "Scrubbing"; docs/scrubbing.md lists the fields): through the real
// daemon, with a stand-in upstream that records exactly what a model is sent and answers what a test tells it to, and
// the real llama.cpp engine (a tiny generated model) for token arrays. Every string of a chat call is scrubbed as the
// model sees it (content parts joined first), or the call is refused with a 400 that names the field; JSON nested past
// its limits is a 400, not a 500; a knowledge base cannot be named after an ID; a structured answer still parses, and
// still matches its schema or is withheld; one huge body of digits neither freezes the daemon nor fails.
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { APIError } from 'openai';
import t from 'tap';
import { ScrubSession } from '../daemon/scrub/index.js';
import { makeModelFixtures } from './fixtures/models.js';
import { makeIban, generator, withLuhn } from './fixtures/scrub-corpus.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';
import { request } from './helpers/http.js';

const nid = withLuhn('101234567');
const nid2 = withLuhn('109876543');
const iqama = withLuhn('234567890');
const card = withLuhn('411111111111111');
const iban = makeIban('SA', generator(3));
const VALUES = [nid, nid2, iqama, card, iban];

// --- the stand-in upstream: it keeps what it is sent, and answers what the test says ---
const seen: any[] = [];
let answer: { content: string; toolCalls?: Array<{ id: string; name: string; arguments: string }> } = { content: 'ok' };
const upstream = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    if (req.method === 'GET') {
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'm' }, { id: 'e' }] }));
      return;
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    seen.push(body);
    if (req.url === '/v1/embeddings') {
      const data = (body.input as string[]).map((_, index) => ({ index, embedding: [0.6, 0.8] }));
      res.end(JSON.stringify({ object: 'list', data, usage: { prompt_tokens: 2, total_tokens: 2 } }));
      return;
    }
    const toolCalls = answer.toolCalls?.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
    if (body.stream) {
      res.setHeader('content-type', 'text/event-stream');
      for (let i = 0; i < answer.content.length; i += 3) {
        res.write(
          `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: answer.content.slice(i, i + 3) }, finish_reason: null }] })}\n\n`,
        );
      }
      res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`);
      res.end('data: [DONE]\n\n');
      return;
    }
    res.end(
      JSON.stringify({
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: toolCalls ? null : answer.content, ...(toolCalls ? { tool_calls: toolCalls } : {}) },
            finish_reason: toolCalls ? 'tool_calls' : 'stop',
          },
        ],
        usage: { prompt_tokens: 9, completion_tokens: 6, total_tokens: 15 },
      }),
    );
  });
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(() => upstream.close());

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({
    dataDir: join(dir, 'data'),
    audit: { signer: 'software', checkpointMs: 200 },
    upstreams: [
      {
        name: 'rack',
        baseUrl: `http://127.0.0.1:${(upstream.address() as { port: number }).port}/v1`,
        models: [
          { id: 'up-chat', upstreamModel: 'm', capability: 'chat' },
          { id: 'up-embed', upstreamModel: 'e', capability: 'embeddings' },
        ],
      },
    ],
  }),
);
const key = createKey(join(dir, 'data'), 'acme', ['--config', config]);
const daemon = await startDaemon(t, ['--config', config, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-embed', 'up-chat', 'up-embed']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const auth = { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' };
const post = (path: string, body: unknown) =>
  request(`${daemon.baseURL}${path}`, { method: 'POST', headers: auth, body: JSON.stringify(body) });

/** Values a text still holds: any the scrubber finds, and any of the test's values written plainly. */
function valuesIn(text: string): string[] {
  return [...new ScrubSession().find(text).map((r) => r.type), ...VALUES.filter((v) => text.includes(v))];
}

t.test('every string a chat call sends reaches the model scrubbed, content parts joined first', async (t) => {
  await client.chat.completions.create({
    model: 'up-chat',
    messages: [
      { role: 'system', content: `Customer ${nid}` },
      // A value cut across two content parts is one value in the text the model sees.
      {
        role: 'user',
        content: [
          { type: 'text', text: `My ID is ${nid2.slice(0, 5)}` },
          { type: 'text', text: nid2.slice(5) },
        ],
      },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: `call_${iqama}`, type: 'function', function: { name: 'lookup', arguments: `{"id": ${nid}, "iban": "${iban}"}` } },
        ],
      },
      { role: 'tool', tool_call_id: `call_${iqama}`, content: `card ${card}` },
    ],
    stop: [`stop on ${nid}`],
    tools: [
      {
        type: 'function',
        function: {
          name: 'lookup',
          description: `Looks up an account such as ${iban}`,
          parameters: {
            type: 'object',
            properties: {
              id: { type: 'integer', description: `for example ${nid}`, enum: [Number(nid), nid2], default: Number(nid2) },
              [`field_${iqama}`]: { type: 'string' },
            },
          },
        },
      },
    ],
    response_format: {
      type: 'json_schema',
      json_schema: { name: 'answer', schema: { type: 'object', properties: { card: { type: 'string', enum: [card] } } } },
    },
  });
  const sent = seen.at(-1);
  t.same(valuesIn(JSON.stringify(sent)), [], 'the upstream was sent no value, in any field');
  t.equal(sent.messages[1].content, 'My ID is [NATIONAL_ID_2]', 'the parts joined, then scrubbed');
  t.same(JSON.parse(sent.messages[2].tool_calls[0].function.arguments), { id: '[NATIONAL_ID]', iban: '[IBAN]' }, 'arguments still JSON');
  t.equal(sent.messages[2].tool_calls[0].id, sent.messages[3].tool_call_id, 'a tool call and its result still match');
  t.same(sent.stop, ['stop on [NATIONAL_ID]']);
  t.match(sent.tools[0].function.description, /\[IBAN\]/);
  t.same(sent.tools[0].function.parameters.properties.id.enum, ['[NATIONAL_ID]', '[NATIONAL_ID_2]']);
  t.ok('field_[IQAMA]' in sent.tools[0].function.parameters.properties, 'property names too');
  t.same(sent.response_format.json_schema.schema.properties.card.enum, ['[CARD]']);
});

t.test('a name that holds a value is refused with a 400 that names the field', async (t) => {
  const tool = (name: string) => ({ type: 'function' as const, function: { name, parameters: { type: 'object', properties: {} } } });
  const cases: Array<[string, Record<string, unknown>]> = [
    ['messages[0].name', { messages: [{ role: 'user', name: `user_${nid}`, content: 'hi' }] }],
    ['tools[0].function.name', { messages: [{ role: 'user', content: 'hi' }], tools: [tool(`pay_${iban}`)] }],
    [
      'tool_choice.function.name',
      {
        messages: [{ role: 'user', content: 'hi' }],
        tools: [tool('pay')],
        tool_choice: { type: 'function', function: { name: `pay${card}` } },
      },
    ],
    [
      'messages[0].tool_calls[0].function.name',
      {
        messages: [
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c', type: 'function', function: { name: `f_${iqama}`, arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: 'c', content: 'done' },
        ],
      },
    ],
  ];
  const before = seen.length;
  for (const [param, body] of cases) {
    const r = await post('/chat/completions', { model: 'up-chat', ...body });
    t.equal(r.status, 400, param);
    t.equal(r.json?.error?.param, param);
    t.equal(r.json?.error?.code, 'invalid_request_error');
    t.match(r.json?.error?.message, /names are sent to the model/);
    t.same(valuesIn(r.text), [], 'the message names no value');
  }
  t.equal(seen.length, before, 'nothing reached the model');
});

/**
 * A JSON schema nested `depth` levels deep, as text: the JSON.stringify of so deep an object would overflow this
 * process's own stack.
 */
function nested(depth: number): string {
  return `${'{"type":"object","properties":{"a":'.repeat(depth)}{"type":"string"}${'}}'.repeat(depth)}`;
}

/** A chat call's body with `json` spliced in at `at` (text, for the deeply nested). */
const rawChat = (extra: string) =>
  request(`${daemon.baseURL}/chat/completions`, {
    method: 'POST',
    headers: auth,
    body: `{"model":"up-chat","messages":[{"role":"user","content":"hi"}],${extra}}`,
  });

t.test('JSON nested past its limits is a 400 that names the field, not a 500', async (t) => {
  const deepTool = await rawChat(`"tools":[{"type":"function","function":{"name":"f","parameters":${nested(5000)}}}]`);
  t.equal(deepTool.status, 400, 'tool parameters nested 5,000 deep');
  t.match(deepTool.json?.error?.param, /^tools\[0\]\.function\.parameters/);
  t.match(deepTool.json?.error?.message, /nested more than 64 levels/);
  const deepSchema = await rawChat(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":${nested(5000)}}}`);
  t.equal(deepSchema.status, 400, 'a response_format schema nested 5,000 deep');
  t.match(deepSchema.json?.error?.param, /^response_format\.json_schema\.schema/);
  const reasonable = await rawChat(`"tools":[{"type":"function","function":{"name":"f","parameters":${nested(20)}}}]`);
  t.equal(reasonable.status, 200, 'twenty levels are served');

  let metadata: Record<string, unknown> = { leaf: 'x' };
  for (let i = 0; i < 9; i++) metadata = { child: metadata };
  const deepMetadata = await post('/documents', { knowledge_base: 'kb', content: 'hello', metadata });
  t.equal(deepMetadata.status, 400, 'document metadata nested more than 8 levels');
  t.equal(deepMetadata.json?.error?.param, 'metadata');
});

t.test('a knowledge base cannot be named after an ID; other names are stored as given', async (t) => {
  const name = `kb-${withLuhn('198765432')}`;
  const refused = await post('/documents', { knowledge_base: name, content: 'hello' });
  t.equal(refused.status, 400);
  t.equal(refused.json?.error?.param, 'knowledge_base');
  t.match(refused.json?.error?.message, /stored and listed/);
  const listed = await request(`${daemon.baseURL}/documents?knowledge_base=${name}`, { headers: auth });
  t.same(listed.json?.data, [], 'nothing was stored under it');
  const stored = await post('/documents', { knowledge_base: 'kb-2026', content: 'hello' });
  t.equal(stored.status, 201);
  t.equal(stored.json?.knowledge_base, 'kb-2026');
});

t.test("a value in a document's metadata is scrubbed before it is stored, written as a number or as a string", async (t) => {
  const metadata = { customer: Number(nid), cards: [Number(card)], nested: { iqama: Number(iqama), note: `id ${nid2}` }, pages: 12 };
  const stored = await post('/documents', { knowledge_base: 'meta', content: 'hello', metadata });
  t.equal(stored.status, 201, stored.text.slice(0, 200));
  const expected = {
    customer: '[NATIONAL_ID]',
    cards: ['[CARD]'],
    nested: { iqama: '[IQAMA]', note: 'id [NATIONAL_ID_2]' },
    pages: 12,
  };
  t.same(stored.json?.metadata, expected, 'the answer');
  const listed = await request(`${daemon.baseURL}/documents?knowledge_base=meta`, { headers: auth });
  t.same(listed.json?.data?.[0]?.metadata, expected, 'what is stored and listed');
  t.same(valuesIn(listed.text), [], 'no value in the listing');
});

t.test('embedding token arrays: read back into text and scrubbed, or refused where they cannot be', async (t) => {
  // The tiny model's vocabulary has a byte token for every byte, from id 5: the ID's digits as its own tokens.
  const tokens = [...Buffer.from(nid)].map((byte) => 5 + byte);
  const asTokens = await client.embeddings.create({ model: 'tiny-embed', input: [tokens] });
  const asPlaceholder = await client.embeddings.create({ model: 'tiny-embed', input: '[NATIONAL_ID]' });
  const asValue = await client.embeddings.create({ model: 'tiny-embed', input: nid });
  t.same(asTokens.data[0].embedding, asPlaceholder.data[0].embedding, 'the ID in tokens is embedded as its placeholder');
  t.same(asValue.data[0].embedding, asPlaceholder.data[0].embedding, 'as the ID in text is');
  const plain = [...Buffer.from('hello')].map((byte) => 5 + byte);
  const asSent = await client.embeddings.create({ model: 'tiny-embed', input: [plain] });
  t.notSame(asSent.data[0].embedding, asPlaceholder.data[0].embedding, 'tokens without a value are embedded as sent');

  const before = seen.length;
  const refused = await post('/embeddings', { model: 'up-embed', input: [tokens] });
  t.equal(refused.status, 400, "an upstream's vocabulary is not known here");
  t.equal(refused.json?.error?.param, 'input');
  t.match(refused.json?.error?.message, /Send the input as text/);
  t.equal(seen.length, before, 'nothing reached the upstream');
});

t.test('a structured answer still parses with its placeholders, and still matches its schema or is withheld', async (t) => {
  answer = { content: `{"id": ${nid}, "note": "card ${card}"}` };
  t.teardown(() => (answer = { content: 'ok' }));
  const asObject = await client.chat.completions.create({
    model: 'up-chat',
    messages: [{ role: 'user', content: 'hi' }],
    response_format: { type: 'json_object' },
  });
  t.same(JSON.parse(asObject.choices[0].message.content!), { id: '[NATIONAL_ID]', note: 'card [CARD]' }, 'json_object');

  const either = { type: 'object', properties: { id: { type: ['integer', 'string'] }, note: { type: 'string' } }, required: ['id'] };
  const asEither = await client.chat.completions.create({
    model: 'up-chat',
    messages: [{ role: 'user', content: 'hi' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: either } },
  });
  t.same(JSON.parse(asEither.choices[0].message.content!).id, '[NATIONAL_ID]', 'a schema that lets the field be a string');

  const integer = { type: 'object', properties: { id: { type: 'integer' }, note: { type: 'string' } }, required: ['id'] };
  const withheld = await client.chat.completions
    .create({
      model: 'up-chat',
      messages: [{ role: 'user', content: 'hi' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: integer } },
    })
    .then(
      () => null,
      (err: unknown) => err,
    );
  t.ok(withheld instanceof APIError && withheld.status === 500, 'a schema that wants a number there: withheld');
  t.match((withheld as APIError).message, /where your schema wants a number/);
  t.same(valuesIn(String((withheld as APIError).message)), []);

  const streamed = await client.chat.completions.create({
    model: 'up-chat',
    messages: [{ role: 'user', content: 'hi' }],
    response_format: { type: 'json_object' },
    stream: true,
  });
  let text = '';
  for await (const chunk of streamed) text += chunk.choices[0]?.delta.content ?? '';
  t.same(JSON.parse(text), { id: '[NATIONAL_ID]', note: 'card [CARD]' }, 'streamed, cut anywhere, it still parses');

  const streamedInteger = await client.chat.completions.create({
    model: 'up-chat',
    messages: [{ role: 'user', content: 'hi' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: integer } },
    stream: true,
  });
  const failed = await (async () => {
    try {
      for await (const chunk of streamedInteger) void chunk;
      return null;
    } catch (err) {
      return err;
    }
  })();
  t.ok(failed instanceof Error, 'streamed against a schema that wants a number: the stream ends in an error');

  answer = { content: '', toolCalls: [{ id: 'call_1', name: 'pay', arguments: `{"iban":"${iban}","customer":${nid}}` }] };
  const called = await client.chat.completions.create({
    model: 'up-chat',
    messages: [{ role: 'user', content: 'pay' }],
    tools: [{ type: 'function', function: { name: 'pay', parameters: { type: 'object', properties: {} } } }],
  });
  const args = called.choices[0].message.tool_calls![0];
  t.same(
    JSON.parse(args.type === 'function' ? args.function.arguments : '{}'),
    { iban: '[IBAN]', customer: '[NATIONAL_ID]' },
    'tool-call arguments still parse',
  );
});

/** Polls /healthz while `work` runs; resolves with the work's result and the slowest answer, in ms. */
async function whileWatching<T>(work: Promise<T>): Promise<{ result: T; slowest: number }> {
  let done = false;
  let slowest = 0;
  const watching = (async () => {
    for (let polls = 0; !done && polls < 2000; polls++) {
      const started = performance.now();
      await request(`${daemon.origin}/healthz`);
      slowest = Math.max(slowest, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  const result = await work.finally(() => (done = true));
  await watching;
  return { result, slowest };
}

t.test("a structured answer's schema cannot stall the daemon: its check runs apart, within a time budget", async (t) => {
  // A pattern that backtracks exponentially on the answer the client had the model write (on the daemon before, the
  // check ran on the event loop: 30 characters held every call for 6 to 25 s, 40 for hours). The check is stopped at
  // its budget and the answer withheld, while health answers throughout.
  answer = { content: `{"name": "${'a'.repeat(30)}!", "id": ${nid}}` };
  t.teardown(() => (answer = { content: 'ok' }));
  const schema = {
    type: 'object',
    properties: { name: { type: 'string', pattern: '^(a+)+$' }, id: { type: ['integer', 'string'] } },
    required: ['name', 'id'],
  };
  const call = client.chat.completions
    .create({
      model: 'up-chat',
      messages: [{ role: 'user', content: 'hi' }],
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
    })
    .then(
      () => null,
      (err: unknown) => err,
    );
  const { result, slowest } = await whileWatching(call);
  t.ok(slowest < 1000, `health answered within ${Math.round(slowest)} ms while the answer was checked`);
  t.ok(result instanceof APIError && result.status === 400, 'withheld, as the schema is what to change');
  t.match((result as APIError).message, /could not be checked against your schema/);
  t.equal((result as APIError).param, 'response_format.json_schema.schema');
  t.same(valuesIn(String((result as APIError).message)), []);

  // The same schema on an answer its pattern settles at once is served.
  answer = { content: `{"name": "aaa", "id": ${nid}}` };
  const served = await client.chat.completions.create({
    model: 'up-chat',
    messages: [{ role: 'user', content: 'hi' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
  });
  t.same(JSON.parse(served.choices[0].message.content!), { name: 'aaa', id: '[NATIONAL_ID]' });
});

t.test('one body of a single 1.7 MB digit run of IDs is scrubbed whole without freezing the daemon', async (t) => {
  const digits = '1047382914 '.repeat(160_000);
  const chat = await whileWatching(post('/chat/completions', { model: 'up-chat', messages: [{ role: 'user', content: digits }] }));
  t.equal(chat.result.status, 200, chat.result.text.slice(0, 200));
  // Generous: on the daemon before, health waited 23 s for this call, then the call failed.
  t.ok(chat.slowest < 1000, `health answered within ${Math.round(chat.slowest)} ms while it was scrubbed`);
  const content = seen.at(-1).messages[0].content as string;
  t.equal(content, '[NATIONAL_ID] '.repeat(160_000), 'every ID replaced, all with the one placeholder');

  const document = await whileWatching(post('/documents', { knowledge_base: 'numbers', content: digits }));
  t.equal(document.result.status, 201, document.result.text.slice(0, 200));
  t.equal(document.result.json?.redactions?.NATIONAL_ID, 160_000);
  t.ok(document.slowest < 1000, `health answered within ${Math.round(document.slowest)} ms while it was ingested`);
});

t.test('the scrubbing and schema-checking threads never keep a process alive: a process that used them ends on its own', async (t) => {
  const dir = tempDir(t);
  const scrub = new URL('../daemon/scrub/index.js', import.meta.url).href;
  const loader = new URL('../node_modules/@tapjs/typescript/dist/esm/import.mjs', import.meta.url).href;
  const run = (name: string, code: string) => {
    const script = join(dir, `${name}.mjs`);
    writeFileSync(script, `import { scrubOffLoop } from ${JSON.stringify(scrub)};\n${code}`);
    return spawnSync(process.execPath, ['--import', loader, script], { encoding: 'utf8', timeout: 30_000 });
  };
  // Before, each went on until killed: the worker's idle end is a minute away, and it held the process.
  const large = run(
    'large',
    `const { body } = await scrubOffLoop('chat', { model: 'm', messages: [{ role: 'user', content: '${nid} '.repeat(20000) }] });\n` +
      `console.log(body.messages[0].content.slice(0, 14));\n`,
  );
  t.equal(large.stdout, '[NATIONAL_ID] \n', large.stderr.slice(0, 500));
  t.same([large.signal, large.status], [null, 0], 'a large body: the process ended by itself');

  // A body nested too deep to copy to the worker is refused by it (the caller then scrubs it where it is).
  const deep = run(
    'deep',
    `let deep = []; for (let i = 0; i < 100000; i++) deep = [deep];\n` +
      `await scrubOffLoop('chat', { model: 'm', messages: [], x: deep }).catch((err) => console.log(err.name));\n`,
  );
  t.equal(deep.stdout, 'NotCopyable\n', deep.stderr.slice(0, 500));
  t.same([deep.signal, deep.status], [null, 0], 'a body it could not take: the process ended by itself');

  // The thread that checks structured answers against their schemas, likewise.
  const schemaCheck = run(
    'schema',
    `const { checkAnswer } = await import(${JSON.stringify(new URL('../daemon/http/answer-schema.js', import.meta.url).href)});\n` +
      `console.log((await checkAnswer({ type: 'object', required: ['id'] }, '{"id": "[NATIONAL_ID]"}')).matches);\n`,
  );
  t.equal(schemaCheck.stdout, 'true\n', schemaCheck.stderr.slice(0, 500));
  t.same([schemaCheck.signal, schemaCheck.status], [null, 0], 'a schema check: the process ended by itself');
});
