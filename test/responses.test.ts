// The Responses API (/v1/responses) on the real llama.cpp engine with a tiny random-weight model, through the official
// OpenAI client: text and message input, instructions, typed streaming events, stored responses continued with
// previous_response_id (and only by their own project), function tools and their outputs, structured text, the
// pipeline in front of it (scrubbing before the model and before the disk, the audit leaf), and what is refused by name.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI from 'openai';
import { Ajv } from 'ajv';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';
import { ResponseStore } from '../daemon/responses/index.js';
import { openStore } from '../daemon/store/index.js';

const IBAN = 'SA03 8000 0000 6080 1016 7519';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = `${dir}/data`;
const key = createKey(dataDir);
const other = createKey(dataDir, 'other-team');
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-chat']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const otherClient = new OpenAI({ apiKey: other.secret, baseURL: daemon.baseURL, maxRetries: 0 });

t.test('a text input: a completed response with one message, usage, and the audit leaf', async (t) => {
  const { data: response, response: http } = await client.responses
    .create({ model: 'tiny-chat', input: 'Hello there', max_output_tokens: 12, temperature: 0 })
    .withResponse();
  t.match(response.id, /^resp_[0-9a-f]{32}$/);
  t.equal(response.object, 'response');
  t.ok(['completed', 'incomplete'].includes(response.status!), response.status!);
  t.equal(response.model, 'tiny-chat');
  t.equal(response.output.length, 1);
  const [message] = response.output;
  t.equal(message.type, 'message');
  if (message.type !== 'message') return;
  t.equal(message.role, 'assistant');
  t.match(message.id, /^msg_[0-9a-f]{32}$/);
  t.equal(message.content[0].type, 'output_text');
  t.type(response.output_text, 'string', "the client's output_text helper reads it");
  t.ok(response.usage!.input_tokens > 0 && response.usage!.output_tokens <= 12);
  t.equal(response.usage!.total_tokens, response.usage!.input_tokens + response.usage!.output_tokens);
  t.match(http.headers.get('x-audit-leaf'), /^\d+$/);
  t.equal(http.headers.get('x-sovereign'), 'true');
  if (response.status === 'incomplete') t.same(response.incomplete_details, { reason: 'max_output_tokens' });
});

t.test('instructions and message items with content parts', async (t) => {
  const plain = await client.responses.create({ model: 'tiny-chat', input: 'Hi', max_output_tokens: 4, temperature: 0 });
  const response = await client.responses.create({
    model: 'tiny-chat',
    instructions: 'Answer in one word.',
    input: [
      { role: 'user', content: [{ type: 'input_text', text: 'Hi' }] },
      {
        role: 'assistant',
        content: [{ type: 'output_text', text: 'Hello.', annotations: [] }],
      } as unknown as OpenAI.Responses.ResponseInputItem,
      { role: 'user', content: 'And again?' },
    ],
    max_output_tokens: 4,
    temperature: 0,
  });
  t.ok(response.usage!.input_tokens > plain.usage!.input_tokens, 'the instructions and every item reach the model');
  t.equal(response.instructions, 'Answer in one word.');
});

t.test('streamed: typed events in order, numbered, their text that of the completed response; no [DONE]', async (t) => {
  const stream = await client.responses.create({
    model: 'tiny-chat',
    input: 'Tell me',
    max_output_tokens: 16,
    temperature: 0,
    stream: true,
  });
  const types: string[] = [];
  const numbers: number[] = [];
  let deltas = '';
  let done = '';
  let final: OpenAI.Responses.Response | undefined;
  for await (const event of stream) {
    types.push(event.type);
    numbers.push(event.sequence_number);
    if (event.type === 'response.output_text.delta') deltas += event.delta;
    if (event.type === 'response.output_text.done') done = event.text;
    if (event.type === 'response.completed' || event.type === 'response.incomplete') final = event.response;
  }
  t.same(numbers, [...numbers.keys()], 'sequence numbers count from 0');
  t.same(types.slice(0, 2), ['response.created', 'response.in_progress']);
  const middle = types.filter((type) => type !== 'response.output_text.delta').slice(2);
  t.same(middle, [
    'response.output_item.added',
    'response.content_part.added',
    'response.output_text.done',
    'response.content_part.done',
    'response.output_item.done',
    final?.status === 'incomplete' ? 'response.incomplete' : 'response.completed',
  ]);
  t.ok(deltas.length > 0);
  t.equal(done, deltas);
  const finalMessage = final?.output[0];
  t.equal(finalMessage?.type === 'message' && finalMessage.content[0].type === 'output_text' ? finalMessage.content[0].text : null, deltas);

  const buffered = await client.responses.create({ model: 'tiny-chat', input: 'Tell me', max_output_tokens: 16, temperature: 0 });
  t.equal(buffered.output_text, deltas, 'the same text buffered and streamed');

  const raw = await fetch(`${daemon.baseURL}/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny-chat', input: 'x', max_output_tokens: 2, stream: true }),
  });
  const text = await raw.text();
  t.match(text, /^event: response\.created\ndata: \{"type":"response\.created","sequence_number":0,/);
  t.match(text, /: x-audit-leaf \d+\n\n$/, 'the audit leaf comes last');
  t.notMatch(text, /\[DONE\]/);
});

t.test('stored responses: GET, input items, continued by previous_response_id, deleted; each project sees its own', async (t) => {
  const first = await client.responses.create({ model: 'tiny-chat', input: 'My name is Huda.', max_output_tokens: 6, temperature: 0 });
  t.equal((first as unknown as { store: boolean }).store, true, 'stored by default, as OpenAI does');
  const fetched = await client.responses.retrieve(first.id);
  t.same(fetched, first, 'GET returns the response as it was answered');

  const items = await client.responses.inputItems.list(first.id);
  t.equal(items.data.length, 1);
  const item = items.data[0] as { type: string; role: string; content: Array<{ type: string; text: string }> };
  t.same([item.type, item.role, item.content[0].type, item.content[0].text], ['message', 'user', 'input_text', 'My name is Huda.']);

  const fresh = await client.responses.create({ model: 'tiny-chat', input: 'What is my name?', max_output_tokens: 4, temperature: 0 });
  const next = await client.responses.create({
    model: 'tiny-chat',
    input: 'What is my name?',
    previous_response_id: first.id,
    max_output_tokens: 4,
    temperature: 0,
  });
  t.equal(next.previous_response_id, first.id);
  t.ok(next.usage!.input_tokens > fresh.usage!.input_tokens, 'the earlier turn is in the context');

  const third = await client.responses.create({ model: 'tiny-chat', input: 'And?', previous_response_id: next.id, max_output_tokens: 2 });
  t.ok(third.usage!.input_tokens > next.usage!.input_tokens, 'a chain carries every turn');

  // Another project: as if the response did not exist.
  const notTheirs = await otherClient.responses.retrieve(first.id).catch((e) => e);
  t.ok(notTheirs instanceof OpenAI.NotFoundError, String(notTheirs));
  const cannotContinue = await otherClient.responses
    .create({ model: 'tiny-chat', input: 'x', previous_response_id: first.id })
    .catch((e) => e);
  t.ok(cannotContinue instanceof OpenAI.BadRequestError, String(cannotContinue));
  t.equal(cannotContinue.param, 'previous_response_id');
  const cannotDelete = await otherClient.responses.delete(first.id).catch((e) => e);
  t.ok(cannotDelete instanceof OpenAI.NotFoundError);

  const unstored = await client.responses.create({ model: 'tiny-chat', input: 'x', max_output_tokens: 2, store: false });
  t.equal((unstored as unknown as { store: boolean }).store, false);
  t.ok((await client.responses.retrieve(unstored.id).catch((e) => e)) instanceof OpenAI.NotFoundError, 'store: false keeps nothing');

  await client.responses.delete(first.id);
  t.ok((await client.responses.retrieve(first.id).catch((e) => e)) instanceof OpenAI.NotFoundError, 'deleted');
  const broken = await client.responses.create({ model: 'tiny-chat', input: 'x', previous_response_id: next.id }).catch((e) => e);
  t.ok(broken instanceof OpenAI.BadRequestError, 'a chain with a deleted turn cannot be continued');
});

t.test('function tools: a call as an output item, its result sent back as function_call_output', async (t) => {
  const parameters = {
    type: 'object',
    properties: { city: { enum: ['Riyadh', 'Jeddah'] }, days: { type: 'integer' } },
    required: ['city', 'days'],
    additionalProperties: false,
  };
  const tools: OpenAI.Responses.Tool[] = [{ type: 'function', name: 'forecast', description: 'Weather', parameters, strict: true }];
  const asked = await client.responses.create({
    model: 'tiny-chat',
    input: 'Weather in Riyadh?',
    tools,
    tool_choice: 'required',
    seed: 1,
  } as never);
  const call = (asked as OpenAI.Responses.Response).output.find((o) => o.type === 'function_call');
  t.ok(call, 'a function_call item');
  if (call?.type !== 'function_call') return;
  t.equal(call.name, 'forecast');
  t.match(call.call_id, /\S/);
  t.match(call.id, /^fc_[0-9a-f]{32}$/);
  t.ok(new Ajv().compile(parameters)(JSON.parse(call.arguments)), call.arguments);

  const answered = await client.responses.create({
    model: 'tiny-chat',
    previous_response_id: (asked as OpenAI.Responses.Response).id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"celsius": 31}' }],
    tools,
    max_output_tokens: 8,
  });
  t.equal(answered.output[0].type, 'message', 'the model answers after the result');

  // The whole exchange sent back by the client, as frameworks that keep their own history do (and by reference).
  const replayed = await client.responses.create({
    model: 'tiny-chat',
    input: [
      { role: 'user', content: 'Weather in Riyadh?' },
      { type: 'item_reference', id: call.id! },
      { type: 'function_call_output', call_id: call.call_id, output: '{"celsius": 31}' },
    ],
    tools,
    max_output_tokens: 8,
  });
  t.equal(replayed.output[0].type, 'message');

  const streamed = await client.responses.create({
    model: 'tiny-chat',
    input: 'Weather in Jeddah?',
    tools,
    tool_choice: 'required',
    stream: true,
  });
  const types: string[] = [];
  let args = '';
  for await (const event of streamed) {
    types.push(event.type);
    if (event.type === 'response.function_call_arguments.done') args = event.arguments;
  }
  t.same(types.slice(2), [
    'response.output_item.added',
    'response.function_call_arguments.delta',
    'response.function_call_arguments.done',
    'response.output_item.done',
    'response.completed',
  ]);
  t.ok(new Ajv().compile(parameters)(JSON.parse(args)), args);
});

t.test('structured text: json_schema, strict, validates', async (t) => {
  const schema = {
    type: 'object',
    properties: { name: { enum: ['Huda', 'Omar'] }, age: { type: 'integer' }, score: { type: 'number' } },
    required: ['name', 'age', 'score'],
    additionalProperties: false,
  };
  const validate = new Ajv().compile(schema);
  for (let seed = 1; seed <= 3; seed++) {
    const response = await client.responses.create({
      model: 'tiny-chat',
      input: 'A person.',
      text: { format: { type: 'json_schema', name: 'person', schema, strict: true } },
      max_output_tokens: 200,
      seed,
    } as never);
    const value = JSON.parse((response as OpenAI.Responses.Response).output_text);
    t.ok(validate(value), JSON.stringify(value));
  }
});

t.test('personal data is scrubbed before the model and before the disk', async (t) => {
  const response = await client.responses.create({
    model: 'tiny-chat',
    instructions: `The customer's IBAN is ${IBAN}.`,
    input: [
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'Pay to SA03 8000 0000 ' },
          { type: 'input_text', text: '6080 1016 7519 now' },
        ],
      },
    ],
    metadata: { account: IBAN },
    max_output_tokens: 3,
  });
  t.match(response.instructions, /\[IBAN\]/);
  t.same(response.metadata, { account: '[IBAN]' });
  const items = await client.responses.inputItems.list(response.id);
  const text = (items.data[0] as { content: Array<{ text: string }> }).content[0].text;
  t.equal(text, 'Pay to [IBAN] now', 'a value cut across two parts is still one value');
  for (const file of readdirSync(dataDir).filter((f) => f.startsWith('sovereign.mdb'))) {
    const bytes = readFileSync(join(dataDir, file));
    t.notOk(bytes.includes('6080 1016 7519') || bytes.includes('608010167519'), `${file} holds no IBAN`);
  }
});

t.test('what is not served is refused by name', async (t) => {
  const cases: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ tools: [{ type: 'web_search_preview' }] }, 'tools[0].type', /'web_search_preview' tool is not served/],
    [{ tools: [{ type: 'file_search', vector_store_ids: ['vs_1'] }] }, 'tools[0].type', /no hosted tools/],
    [{ reasoning: { effort: 'high' } }, 'reasoning.effort', /do not produce reasoning/],
    [{ reasoning: { summary: 'auto' } }, 'reasoning.summary', /do not produce reasoning/],
    [{ include: ['message.output_text.logprobs'] }, 'include[0]', /cannot be included/],
    [{ top_logprobs: 2 }, 'top_logprobs', /not offered/],
    [{ background: true }, 'background', /Background responses/],
    [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:,' }] }] }, 'input[0].content[0].type', /'input_image'/],
    [{ input: [{ type: 'reasoning', summary: [] }] }, 'input[0].type', /'reasoning' item/],
    [{ input: [{ type: 'item_reference', id: 'msg_00' }] }, 'input[0].id', /not stored for this project/],
  ];
  for (const [extra, param, message] of cases) {
    const err = await client.responses.create({ model: 'tiny-chat', input: 'x', ...extra } as never).catch((e) => e);
    t.ok(err instanceof OpenAI.BadRequestError, `${JSON.stringify(extra)}: ${err}`);
    t.equal(err.param, param, JSON.stringify(extra));
    t.match(err.message, message);
  }
});

t.test('a stored response expires after responses.ttlSeconds, items and all', async (t) => {
  const storeDir = tempDir(t);
  const store = openStore(storeDir);
  let now = 1_000_000;
  const responses = new ResponseStore(store, 60_000, () => now);
  t.teardown(async () => {
    responses.close();
    await store.close();
  });
  const item = { type: 'message', id: 'msg_in', role: 'user', content: [{ type: 'input_text', text: 'hi' }] };
  const output = [{ type: 'message', id: 'msg_out', role: 'assistant', content: [] }];
  await responses.save('p', { id: 'resp_1', object: 'response', created_at: 1, output, previous_response_id: null }, [item]);
  t.ok(responses.get('p', 'resp_1'));
  t.equal(responses.get('q', 'resp_1'), null, "another project's is not seen");
  t.same(responses.item('p', 'msg_out'), output[0]);
  now += 59_999;
  t.ok(responses.get('p', 'resp_1'), 'kept until its time');
  now += 1;
  t.equal(responses.get('p', 'resp_1'), null, 'gone at its time, before any sweep');
  t.equal(responses.item('p', 'msg_in'), null);
  t.equal(await responses.sweep(), 1);
  t.equal(await responses.sweep(), 0, 'and deleted');
});
