// Structured output on the real llama.cpp engine with a tiny random-weight model, through the official OpenAI client:
// a strict json_schema answer always validates against its schema (checked here with ajv, and with zod through the
// client's own `parse`), or the call fails with an error that says why. Random weights write arbitrary numbers, which
// is what exercises the grammar: integers that would need an exponent, numbers that would overflow to Infinity. (They
// also write broken UTF-8, whose replacement characters a string's maxLength counts where the grammar did not, and
// strings of any length: such answers are withheld or long, so the schemas here that must always succeed hold their
// strings to enums.)
import t from 'tap';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { Ajv } from 'ajv';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = `${dir}/data`;
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-chat']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const ajv = new Ajv({ strict: false });

const person = {
  type: 'object',
  properties: {
    name: { enum: ['Huda', 'Omar', 'Lina'] },
    age: { type: 'integer' },
    score: { type: 'number' },
    tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 },
    nickname: { anyOf: [{ const: 'Abu Ali' }, { type: 'null' }] },
  },
  required: ['name', 'age', 'score', 'tags', 'nickname'],
  additionalProperties: false,
};

t.test('every strict answer validates: integers without exponents, finite numbers, anyOf', async (t) => {
  const validate = ajv.compile(person);
  for (let seed = 1; seed <= 4; seed++) {
    const completion = await client.chat.completions.create({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
      seed,
      max_tokens: 400,
    });
    const text = completion.choices[0].message.content!;
    const value = JSON.parse(text);
    t.ok(validate(value), `seed ${seed}: ${text} ${JSON.stringify(validate.errors)}`);
    t.ok(Number.isSafeInteger(value.age), `seed ${seed}: age ${value.age} is a safe integer`);
    t.ok(Number.isFinite(value.score), `seed ${seed}: score ${value.score} is finite`);
    t.notMatch(text, /"age"\s*:\s*-?\d+[eE.]/, `seed ${seed}: the integer is written without exponent or fraction`);
  }
});

t.test("the client's own parse with a zod schema succeeds every time", async (t) => {
  const Person = z.object({
    name: z.enum(['Huda', 'Omar']),
    age: z.number().int(),
    score: z.number(),
    ok: z.boolean(),
    note: z.literal('n').nullable(),
  });
  for (let seed = 1; seed <= 3; seed++) {
    const completion = await client.chat.completions.parse({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'A person, please.' }],
      response_format: zodResponseFormat(Person, 'person'),
      seed,
      max_tokens: 300,
    });
    const parsed = completion.choices[0].message.parsed;
    t.ok(parsed && Person.safeParse(parsed).success, `seed ${seed}: ${JSON.stringify(parsed)}`);
  }
});

t.test('definitions and $ref, and a lone allOf, are enforced', async (t) => {
  const schema = {
    type: 'object',
    definitions: { point: { type: 'object', properties: { x: { type: 'integer' }, y: { type: 'integer' } }, required: ['x', 'y'] } },
    properties: { from: { $ref: '#/definitions/point' }, to: { allOf: [{ $ref: '#/definitions/point' }], description: 'end' } },
    required: ['from', 'to'],
    additionalProperties: false,
  };
  const validate = ajv.compile(schema);
  const completion = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'A segment.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'segment', schema, strict: true } },
    seed: 3,
    max_tokens: 300,
  });
  const value = JSON.parse(completion.choices[0].message.content!);
  t.ok(validate(value), JSON.stringify(value));
});

t.test('a strict answer that cannot match is withheld with an error that says where and why', async (t) => {
  // The grammar holds the model to types, not to ranges: a random model never writes exactly this number.
  const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 123456789, maximum: 123456789 } }, required: ['n'] };
  const err = await client.chat.completions
    .create({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'n?' }],
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema, strict: true } },
      seed: 5,
    })
    .catch((e) => e);
  t.ok(err instanceof OpenAI.InternalServerError, String(err));
  t.equal(err.code, 'internal_error');
  t.match(err.message, /does not match your schema \(its answer: \/n must be (>=|<=) 123456789\)/);

  // Streamed, the text already sent stays sent, and the stream ends with the error instead of a finish chunk.
  const stream = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'n?' }],
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema, strict: true } },
    seed: 5,
    stream: true,
  });
  let text = '';
  const failure = await (async () => {
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      t.not(chunk.choices[0]?.finish_reason, 'stop', 'no finish chunk');
    }
  })().catch((e) => e);
  t.ok(failure instanceof OpenAI.APIError, String(failure));
  t.match(failure.message, /does not match your schema/);
  t.match(text, /^\{/, 'the text streamed before the check');

  // Not strict: the answer is the model's, as OpenAI's is.
  const loose = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'n?' }],
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema } },
    seed: 5,
  });
  t.type(JSON.parse(loose.choices[0].message.content!).n, 'number');
});

t.test('a strict answer cut off by max_tokens is a 400 naming the parameter', async (t) => {
  for (const param of ['max_tokens', 'max_completion_tokens'] as const) {
    const err = await client.chat.completions
      .create({
        model: 'tiny-chat',
        messages: [{ role: 'user', content: 'Describe a person as JSON.' }],
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
        [param]: 3,
      })
      .catch((e) => e);
    t.ok(err instanceof OpenAI.BadRequestError, String(err));
    t.equal(err.param, param);
    t.match(err.message, new RegExp(`Raise '${param}'`));
  }
});

t.test('schemas the grammar cannot express are refused with the keyword and its place', async (t) => {
  for (const [schema, pattern] of [
    [{ type: 'object', properties: { a: { not: { type: 'string' } } } }, /'not' \(at the root\.properties\.a\)/],
    [
      { type: 'object', properties: { a: { allOf: [{ type: 'string' }, { maxLength: 3 }] } } },
      /'allOf' \(at the root\.properties\.a\) with more than one/,
    ],
    [{ type: 'object', properties: { a: { $ref: 'https://example.org/s.json' } } }, /'\$ref' 'https:\/\/example\.org\/s\.json'/],
  ] as const) {
    const err = await client.chat.completions
      .create({
        model: 'tiny-chat',
        messages: [{ role: 'user', content: 'x' }],
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: schema, strict: true } },
      })
      .catch((e) => e);
    t.ok(err instanceof OpenAI.BadRequestError, String(err));
    t.equal(err.param, 'response_format.json_schema.schema');
    t.match(err.message, pattern);
  }
});

t.test('a strict tool forced by tool_choice gets arguments that validate', async (t) => {
  const parameters = {
    type: 'object',
    properties: { city: { enum: ['Riyadh', 'Jeddah'] }, days: { type: 'integer' }, celsius: { type: 'number' } },
    required: ['city', 'days', 'celsius'],
    additionalProperties: false,
  };
  const validate = ajv.compile(parameters);
  for (let seed = 1; seed <= 3; seed++) {
    const completion = await client.chat.completions.create({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: [{ type: 'function', function: { name: 'forecast', parameters, strict: true } }],
      tool_choice: 'required',
      seed,
    });
    const call = completion.choices[0].message.tool_calls![0];
    t.equal(call.type, 'function');
    const args = JSON.parse((call as { function: { arguments: string } }).function.arguments);
    t.ok(validate(args), `seed ${seed}: ${JSON.stringify(args)}`);
  }
});

t.test('token log probabilities are refused by name: they would show unscrubbed tokens', async (t) => {
  for (const [extra, param] of [
    [{ logprobs: true }, 'logprobs'],
    [{ top_logprobs: 3 }, 'top_logprobs'],
  ] as const) {
    const err = await client.chat.completions
      .create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'hi' }], ...extra })
      .catch((e) => e);
    t.ok(err instanceof OpenAI.BadRequestError, String(err));
    t.equal(err.param, param);
    t.match(err.message, /not offered/);
  }
  const plain = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'hi' }],
    logprobs: false,
    max_tokens: 2,
  });
  t.equal(plain.choices[0].logprobs, null, 'logprobs: false is the default, and allowed');
});

t.test('a tool_choice that asks for a call without tools is refused, naming tool_choice', async (t) => {
  for (const tool_choice of ['required', { type: 'function', function: { name: 'weather' } }] as const) {
    const err = await client.chat.completions
      .create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'x' }], tool_choice })
      .catch((e) => e);
    t.ok(err instanceof OpenAI.BadRequestError, String(err));
    t.equal(err.param, 'tool_choice');
  }
  const responses = await client.responses.create({ model: 'tiny-chat', input: 'x', tool_choice: 'required' }).catch((e) => e);
  t.ok(responses instanceof OpenAI.BadRequestError, String(responses));
  t.equal(responses.param, 'tool_choice');
});
