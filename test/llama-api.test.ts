// Chat and embeddings on the real llama.cpp engine (node-llama-cpp), with tiny random-weight GGUF models the suite
// generates, through the official OpenAI client. Random weights make the text meaningless, so the tests check what
// must hold whatever the weights: shapes, usage, limits, grammar-constrained output, exact UTF-8 round trips.
import t from 'tap';
import OpenAI from 'openai';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';
import { request } from './helpers/http.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = `${dir}/data`;
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
const health = await waitForModels(daemon.baseURL, key.secret, ['tiny-chat', 'tiny-embed']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });

t.test('only present, verified, fitting, loadable models are listed; health says why the others are not', async (t) => {
  const models = await client.models.list();
  t.same(models.data.map((m) => m.id).sort(), ['tiny-chat', 'tiny-embed']);
  t.equal(models.data[0].owned_by, 'sovereign-tests');
  const states = Object.fromEntries(health.unavailable_models.map((m: { id: string; state: string }) => [m.id, m.state]));
  t.same(states, {
    'tampered-chat': 'checksum_mismatch',
    'huge-chat': 'does_not_fit',
    'absent-chat': 'missing',
    'truncated-chat': 'unreadable',
  });
  for (const m of health.unavailable_models) t.ok(m.reason.length > 20, `${m.id} has a reason`);
  const after: any = await (await fetch(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` } })).json();
  const broken = after.models.find((m: { id: string }) => m.id === 'broken-chat');
  t.equal(broken?.readiness, 'failed', 'a model that verifies but cannot load is failed');
  t.match(broken?.detail, /failed to load/);
  t.equal(after.status, 'degraded');
});

t.test('unlisted models are 404 model_not_found naming the model and /v1/models', async (t) => {
  for (const model of ['tampered-chat', 'huge-chat', 'absent-chat', 'truncated-chat', 'broken-chat', 'gpt-4o']) {
    const err = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    t.ok(err instanceof OpenAI.NotFoundError, model);
    t.equal(err.code, 'model_not_found');
    t.match(err.message, new RegExp(`'${model}'.*GET /v1/models`));
  }
  const wrongKind = await client.embeddings.create({ model: 'tiny-chat', input: 'x' }).catch((e) => e);
  t.equal(wrongKind.status, 404, 'a chat model is not an embeddings model');
});

t.test('buffered chat in English and Arabic: OpenAI shape, usage, max_tokens honoured', async (t) => {
  for (const content of ['Hello, who are you?', 'مرحبا، كيف حالك؟ ما هي عاصمة المملكة؟']) {
    const r = await client.chat.completions.create({
      model: 'tiny-chat',
      messages: [
        { role: 'system', content: 'You are helpful.' },
        { role: 'user', content },
      ],
      max_tokens: 12,
      temperature: 0,
    });
    t.equal(r.object, 'chat.completion');
    t.equal(r.model, 'tiny-chat');
    t.equal(r.choices.length, 1);
    t.equal(r.choices[0].message.role, 'assistant');
    t.type(r.choices[0].message.content, 'string');
    t.ok(r.usage!.prompt_tokens > Buffer.byteLength(content) / 8, 'prompt tokens counted from the rendered template');
    t.ok(r.usage!.completion_tokens <= 12, 'no more than max_tokens');
    t.equal(r.usage!.total_tokens, r.usage!.prompt_tokens + r.usage!.completion_tokens);
    if (r.usage!.completion_tokens === 12) t.equal(r.choices[0].finish_reason, 'length');
  }
  const more = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'x' }],
    max_completion_tokens: 3,
    temperature: 0,
  });
  t.ok(more.usage!.completion_tokens <= 3, 'max_completion_tokens honoured');
});

t.test('streaming yields exactly the buffered text (same seed), a finish chunk, usage when asked, and [DONE]', async (t) => {
  const params = {
    model: 'tiny-chat',
    messages: [{ role: 'user' as const, content: 'السلام عليكم and hello' }],
    max_tokens: 24,
    temperature: 0.8,
    seed: 1234,
  };
  const buffered = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  t.ok(chunks > 3, 'several chunks');
  t.equal(text, buffered.choices[0].message.content, 'the same text, chunk by chunk');
  t.equal(finish, buffered.choices[0].finish_reason);
  t.same(usage, buffered.usage, 'the same usage');
});

t.test('Arabic and English round-trip exactly through generation, buffered and streamed (split multi-byte characters)', async (t) => {
  const phrases = ['مرحبا بالعالم من الرياض', 'hello world', 'السلام عليكم ورحمة الله'];
  const response_format = {
    type: 'json_schema' as const,
    json_schema: { name: 'greeting', schema: { type: 'object', properties: { greeting: { enum: phrases } } } },
  };
  const seen = new Set<string>();
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    const body = { model: 'tiny-chat', messages: [{ role: 'user' as const, content: 'قل مرحبا' }], response_format, seed, temperature: 1 };
    const buffered = await client.chat.completions.create(body);
    const parsed = JSON.parse(buffered.choices[0].message.content!);
    t.ok(phrases.includes(parsed.greeting), `seed ${seed}: ${parsed.greeting}`);
    seen.add(parsed.greeting);
    const raw = await request(`${daemon.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
    });
    const deltas = raw.text
      .split('\n\n')
      .filter((l) => l.startsWith('data: {'))
      .map((l) => JSON.parse(l.slice(6)).choices[0]?.delta?.content ?? '');
    t.notOk(deltas.join('').includes('\uFFFD'), 'no replacement character anywhere');
    t.equal(deltas.join(''), buffered.choices[0].message.content, 'streamed pieces rebuild the exact text');
  }
  t.ok(
    [...seen].some((p) => /[\u0600-\u06FF]/.test(p)),
    'at least one Arabic phrase was generated',
  );
});

t.test('JSON mode output parses; json_schema output matches the schema', async (t) => {
  const r = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'Give me JSON' }],
    response_format: { type: 'json_object' },
    max_tokens: 200,
    seed: 3,
  });
  if (r.choices[0].finish_reason === 'stop') t.doesNotThrow(() => JSON.parse(r.choices[0].message.content!), 'parses as JSON');
  else t.match(r.choices[0].message.content, /^\s*[{[]/, 'a JSON document was being generated');
  const schema = {
    type: 'object',
    properties: { city: { enum: ['الرياض', 'جدة'] }, population: { type: 'integer' }, capital: { type: 'boolean' } },
  };
  const s = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'city?' }],
    response_format: { type: 'json_schema', json_schema: { name: 'city', schema } },
    max_tokens: 100,
    seed: 9,
  });
  const value = JSON.parse(s.choices[0].message.content!);
  t.ok(['الرياض', 'جدة'].includes(value.city));
  t.ok(Number.isInteger(value.population));
  t.type(value.capital, 'boolean');
});

t.test('tools: a required or named tool call comes back as tool_calls with arguments valid for its schema', async (t) => {
  const tools: OpenAI.ChatCompletionTool[] = [
    {
      type: 'function',
      function: {
        name: 'get_balance',
        description: 'Balance of an account',
        parameters: { type: 'object', properties: { account: { type: 'string' }, currency: { enum: ['SAR', 'USD'] } } },
      },
    },
    {
      type: 'function',
      function: { name: 'get_time', parameters: { type: 'object', properties: { city: { enum: ['Riyadh', 'Jeddah'] } } } },
    },
  ];
  const r = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'balance?' }],
    tools,
    tool_choice: 'required',
    max_tokens: 200,
    seed: 5,
  });
  const choice = r.choices[0];
  t.equal(choice.finish_reason, 'tool_calls');
  t.equal(choice.message.content, null);
  t.equal(choice.message.tool_calls?.length, 1);
  const call = choice.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
  t.match(call.id, /^call_/);
  t.ok(['get_balance', 'get_time'].includes(call.function.name));
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_time') t.ok(['Riyadh', 'Jeddah'].includes(args.city));
  else t.ok(['SAR', 'USD'].includes(args.currency));

  const named = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'time?' }],
    tools,
    tool_choice: { type: 'function', function: { name: 'get_time' } },
    max_tokens: 100,
  });
  const namedCall = named.choices[0].message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
  t.equal(namedCall.function.name, 'get_time');
  t.ok(['Riyadh', 'Jeddah'].includes(JSON.parse(namedCall.function.arguments).city));

  const cut = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'time?' }],
    tools,
    tool_choice: { type: 'function', function: { name: 'get_time' } },
    max_tokens: 4,
  });
  t.equal(cut.choices[0].finish_reason, 'length', 'a tool call cut off by max_tokens is reported as such, not a 500');
  t.equal(cut.choices[0].message.tool_calls?.length, 1);

  // A schema nested far deeper than any real one must not overflow a stack into a 500.
  let deep: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < 20_000; i++) deep = { type: 'object', properties: { a: deep } };
  const badSchema = await client.chat.completions
    .create({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 2,
      tools: [{ type: 'function', function: { name: 'f', parameters: deep } }],
    })
    .catch((e) => e);
  const status = badSchema instanceof OpenAI.APIError ? badSchema.status : 200;
  t.ok(status === 200 || status === 400, `a pathological tool schema is served or refused, never a server error (${status})`);
  if (status === 400) t.equal(badSchema.param, 'tools[0].function.parameters');

  // The call's result goes back as a tool message; the conversation continues.
  const followUp = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [
      { role: 'user', content: 'time?' },
      named.choices[0].message,
      { role: 'tool', tool_call_id: namedCall.id, content: '14:05' },
    ],
    tools,
    max_tokens: 8,
  });
  t.equal(followUp.object, 'chat.completion');
  const orphan = await client.chat.completions
    .create({
      model: 'tiny-chat',
      messages: [
        { role: 'user', content: 'x' },
        { role: 'tool', tool_call_id: 'call_nope', content: '1' },
      ],
    })
    .catch((e) => e);
  t.equal(orphan.status, 400, 'a tool message answering no call is a 400');
  const unknownTool = await client.chat.completions
    .create({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'x' }],
      tools,
      tool_choice: { type: 'function', function: { name: 'nope' } },
    })
    .catch((e) => e);
  t.equal(unknownTool.status, 400);
  t.equal(unknownTool.param, 'tool_choice');
});

t.test('stop sequences and n', async (t) => {
  const r = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'x' }],
    stop: ['a', 'e', 'o', ' '],
    max_tokens: 60,
    seed: 11,
  });
  for (const s of ['a', 'e', 'o', ' ']) t.notOk(r.choices[0].message.content!.includes(s), `output stops before '${s}'`);
  const n = await client.chat.completions.create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'x' }], n: 2 }).catch((e) => e);
  t.equal(n.status, 400);
  t.equal(n.param, 'n');
});

t.test('a prompt longer than the serving context is a clear 400', async (t) => {
  const err = await client.chat.completions
    .create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'word '.repeat(3000) }] })
    .catch((e) => e);
  t.equal(err.status, 400);
  t.match(err.message, /maximum context length is 1024 tokens/);
});

t.test('embeddings: string, strings, token arrays; float and base64 agree; usage; dimensions', async (t) => {
  const one = await client.embeddings.create({ model: 'tiny-embed', input: 'مرحبا بالعالم', encoding_format: 'float' });
  t.equal(one.object, 'list');
  t.equal(one.data.length, 1);
  const vector = one.data[0].embedding;
  t.equal(vector.length, 32);
  t.ok(Math.abs(Math.hypot(...vector) - 1) < 1e-4, 'unit length');
  t.ok(one.usage.prompt_tokens > 0);
  t.equal(one.usage.total_tokens, one.usage.prompt_tokens);

  const many = await client.embeddings.create({ model: 'tiny-embed', input: ['hello world', 'مرحبا بالعالم'], encoding_format: 'float' });
  t.same(
    many.data.map((d) => d.index),
    [0, 1],
  );
  t.same(many.data[1].embedding, vector, 'same input, same vector');
  t.notSame(many.data[0].embedding, vector);

  const raw = await request(`${daemon.baseURL}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny-embed', input: 'مرحبا بالعالم', encoding_format: 'base64' }),
  });
  const bytes = Buffer.from(raw.json.data[0].embedding, 'base64');
  const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
  t.same(decoded, vector, 'base64 is the same little-endian float32 vector');
  const sdkDefault = await client.embeddings.create({ model: 'tiny-embed', input: 'مرحبا بالعالم' });
  t.same(sdkDefault.data[0].embedding, vector, 'the SDK (which asks for base64) decodes the same vector');

  const tokens = await client.embeddings.create({
    model: 'tiny-embed',
    input: [
      [300, 301, 302],
      [310, 311],
    ],
    encoding_format: 'float',
  });
  t.equal(tokens.data.length, 2);
  t.equal(tokens.usage.prompt_tokens, 5, 'token arrays count their tokens');
  const single = await client.embeddings.create({ model: 'tiny-embed', input: [300, 301, 302], encoding_format: 'float' });
  t.same(single.data[0].embedding, tokens.data[0].embedding, 'one token array equals the same array in a batch');

  const atLimit = await client.embeddings.create({ model: 'tiny-embed', input: [Array(253).fill(300)], encoding_format: 'float' });
  t.equal(atLimit.data[0].embedding.length, 32, 'the longest input that fits with its begin and end tokens');
  for (const length of [254, 256, 300]) {
    const over = await client.embeddings.create({ model: 'tiny-embed', input: [Array(length).fill(300)] }).catch((e) => e);
    t.equal(over.status, 400, `${length} tokens is a clear 400`);
    t.match(over.message, /embeds at most 253/);
  }
  const empty = await client.embeddings.create({ model: 'tiny-embed', input: '' }).catch((e) => e);
  t.equal(empty.status, 400, 'empty input is a 400');

  const badToken = await client.embeddings.create({ model: 'tiny-embed', input: [[999999]] }).catch((e) => e);
  t.equal(badToken.status, 400);
  const dims = await client.embeddings.create({ model: 'tiny-embed', input: 'x', dimensions: 16 }).catch((e) => e);
  t.equal(dims.status, 400, 'this model cannot shorten its vectors');
  t.equal(dims.param, 'dimensions');
  const same = await client.embeddings.create({ model: 'tiny-embed', input: 'x', dimensions: 32, encoding_format: 'float' });
  t.equal(same.data[0].embedding.length, 32, 'asking for the native size is fine');
});
