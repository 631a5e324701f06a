// POST /v1/completions (OpenAI's legacy text completion) on the real llama.cpp engine with a tiny random-weight model,
// through the official OpenAI client: buffered and streamed, several prompts, echo, stop, the default length, and the
// pipeline in front of it (scrubbing of the prompt, the audit leaf), and what is refused by name.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI from 'openai';
import { writeTinyGguf } from './fixtures/gguf.js';
import { entry, makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const IBAN = 'SA03 8000 0000 6080 1016 7519';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
// A code model: its GGUF declares fill-in-the-middle tokens.
const code = writeTinyGguf(join(fixtures.modelsDir, 'tiny-code.gguf'), { seed: 11, fim: true });
const manifest = JSON.parse(readFileSync(fixtures.manifest, 'utf8')) as { models: unknown[] };
manifest.models.push(entry('tiny-code', 'tiny-code.gguf', 'chat', code));
writeFileSync(fixtures.manifest, JSON.stringify(manifest));
const dataDir = `${dir}/data`;
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-chat', 'tiny-code']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });

t.test('a buffered completion: OpenAI shape, usage, the default of 16 tokens', async (t) => {
  const { data: completion, response } = await client.completions
    .create({ model: 'tiny-chat', prompt: 'Once upon a time', seed: 1 })
    .withResponse();
  t.equal(completion.object, 'text_completion');
  t.match(completion.id, /^cmpl-req_[0-9a-f]{32}$/);
  t.equal(completion.model, 'tiny-chat');
  t.equal(completion.choices.length, 1);
  const [choice] = completion.choices;
  t.equal(choice.index, 0);
  t.type(choice.text, 'string');
  t.equal(choice.logprobs, null);
  t.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
  t.ok(completion.usage!.completion_tokens <= 16, `at most 16 tokens by default (${completion.usage!.completion_tokens})`);
  t.ok(completion.usage!.prompt_tokens > 0);
  t.equal(completion.usage!.total_tokens, completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
  t.match(response.headers.get('x-audit-leaf'), /^\d+$/);

  const short = await client.completions.create({ model: 'tiny-chat', prompt: 'abc', max_tokens: 3, seed: 2 });
  t.ok(short.usage!.completion_tokens <= 3);
  if (short.usage!.completion_tokens === 3) t.equal(short.choices[0].finish_reason, 'length');
});

t.test('several prompts: one choice each, in order, usage summed', async (t) => {
  const one = await client.completions.create({ model: 'tiny-chat', prompt: 'first', max_tokens: 4, seed: 3, temperature: 0 });
  const both = await client.completions.create({ model: 'tiny-chat', prompt: ['first', 'second'], max_tokens: 4, seed: 3, temperature: 0 });
  t.same(
    both.choices.map((c) => c.index),
    [0, 1],
  );
  t.equal(both.choices[0].text, one.choices[0].text, 'the same prompt completes the same way, greedy');
  t.ok(both.usage!.prompt_tokens > one.usage!.prompt_tokens);
});

t.test('echo returns the prompt first, as the model saw it: scrubbed', async (t) => {
  const completion = await client.completions.create({
    model: 'tiny-chat',
    prompt: `Pay to ${IBAN} today`,
    echo: true,
    max_tokens: 2,
    seed: 4,
  });
  t.match(completion.choices[0].text, /^Pay to \[IBAN\] today/);
  t.notMatch(completion.choices[0].text, /SA03/);
});

t.test('a streamed completion: text chunks, a finish chunk, usage on request, [DONE]', async (t) => {
  const stream = await client.completions.create({
    model: 'tiny-chat',
    prompt: `Account ${IBAN}:`,
    max_tokens: 8,
    seed: 5,
    echo: true,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  const finishes: string[] = [];
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    t.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      if (choice.finish_reason) finishes.push(choice.finish_reason);
    }
  }
  t.match(text, /^Account \[IBAN\]:/, 'the echoed prompt leads, scrubbed');
  t.equal(finishes.length, 1);
  t.ok(usage && usage.completion_tokens <= 8 && usage.prompt_tokens > 0, JSON.stringify(usage));

  // The raw stream ends with the audit leaf's comment, then [DONE].
  const raw = await fetch(`${daemon.baseURL}/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny-chat', prompt: 'x', max_tokens: 2, stream: true }),
  });
  const body = await raw.text();
  t.match(body, /: x-audit-leaf \d+\n\ndata: \[DONE\]\n\n$/);
});

t.test('stop sequences end the text before them', async (t) => {
  const free = await client.completions.create({ model: 'tiny-chat', prompt: 'x', max_tokens: 24, temperature: 0 });
  const text = free.choices[0].text;
  // A stop sequence taken from the greedy text itself: the same call must end before it.
  const stop = text.slice(4, 6);
  t.ok(stop.length === 2, `a stop sequence from the text (${JSON.stringify(text)})`);
  const stopped = await client.completions.create({ model: 'tiny-chat', prompt: 'x', max_tokens: 24, temperature: 0, stop });
  t.equal(stopped.choices[0].text, text.slice(0, text.indexOf(stop)));
  t.equal(stopped.choices[0].finish_reason, 'stop');
});

t.test('fill-in-the-middle: a suffix reaches a model whose GGUF declares FIM tokens, buffered and streamed', async (t) => {
  const prefix = 'function add(a, b) {\n  return ';
  const plain = await client.completions.create({ model: 'tiny-code', prompt: prefix, max_tokens: 6, temperature: 0 });
  const filled = await client.completions.create({ model: 'tiny-code', prompt: prefix, suffix: ';\n}\n', max_tokens: 6, temperature: 0 });
  t.type(filled.choices[0].text, 'string');
  t.ok(
    filled.usage!.prompt_tokens >= plain.usage!.prompt_tokens + 3,
    `the suffix and the FIM tokens are in the prompt (${plain.usage!.prompt_tokens} without, ${filled.usage!.prompt_tokens} with)`,
  );
  let streamed = '';
  const stream = await client.completions.create({
    model: 'tiny-code',
    prompt: prefix,
    suffix: ';\n}\n',
    max_tokens: 6,
    temperature: 0,
    stream: true,
  });
  for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? '';
  t.equal(streamed, filled.choices[0].text);
});

t.test('what is not served is refused by name', async (t) => {
  const cases: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ prompt: 'x', suffix: 'y' }, 'suffix', /declares no fill-in-the-middle tokens/],
    [{ prompt: [1, 2, 3] }, 'prompt', /as tokens is not supported/],
    [{ prompt: 'x', logprobs: 2 }, 'logprobs', /not offered/],
    [{ prompt: ['a', 'b'], stream: true }, 'prompt', /one prompt/],
  ];
  for (const [extra, param, message] of cases) {
    const err = await client.completions.create({ model: 'tiny-chat', ...(extra as { prompt: string }) }).catch((e) => e);
    t.ok(err instanceof OpenAI.BadRequestError, `${JSON.stringify(extra)}: ${err}`);
    t.equal(err.param, param);
    t.match(err.message, message);
  }
  const notChat = await client.completions.create({ model: 'tiny-embed', prompt: 'x' }).catch((e) => e);
  t.ok(notChat instanceof OpenAI.NotFoundError, 'an embeddings model does not complete text');
});
