// The official openai client against the daemon (tiny real models), through its own helpers as a user writes them:
// chat (create, the streaming helper with its final message, tools run by runTools, parse with a zod format),
// completions, the Responses API (create, the streaming helper, parse with a zod text format) and embeddings. The
// per-endpoint tests (llama-api, completions, responses, structured-output) check the wire format in detail.
import t from 'tap';
import OpenAI from 'openai';
import { zodFunction, zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startClientDaemon } from './helpers/client-daemon.js';

const { baseURL, apiKey } = await startClientDaemon(t);
const client = new OpenAI({ apiKey, baseURL, maxRetries: 0 });
const Person = z.object({ name: z.enum(['Huda', 'Omar']), age: z.number().int(), score: z.number() });

t.test('chat: create, and the streaming helper whose final message is the same text', async (t) => {
  const messages = [{ role: 'user' as const, content: 'مرحبا' }];
  const completion = await client.chat.completions.create({ model: 'tiny-chat', messages, max_tokens: 16, temperature: 0 });
  const text = completion.choices[0].message.content!;
  t.ok(text.length > 0);
  const stream = client.chat.completions.stream({
    model: 'tiny-chat',
    messages,
    max_tokens: 16,
    temperature: 0,
    stream_options: { include_usage: true },
  });
  let deltas = '';
  stream.on('content', (delta) => (deltas += delta));
  const final = await stream.finalChatCompletion();
  t.equal(deltas, text);
  t.equal(final.choices[0].message.content, text);
  t.same(final.usage, completion.usage);
});

t.test('chat: runTools calls the named tool with parsed arguments, and the model answers its result', async (t) => {
  const calls: string[] = [];
  const runner = client.chat.completions.runTools({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'Weather?' }],
    tools: [
      zodFunction({
        name: 'weather',
        parameters: z.object({ city: z.enum(['Riyadh', 'Jeddah']) }),
        function: ({ city }) => {
          calls.push(city);
          return { celsius: 31 };
        },
      }),
    ],
    // A named tool: the runner calls it once and stops.
    tool_choice: { type: 'function', function: { name: 'weather' } },
    max_tokens: 100,
  });
  await runner.done();
  t.equal(calls.length, 1, 'the tool ran once');
  t.ok(['Riyadh', 'Jeddah'].includes(calls[0]));
  t.same(runner.messages.at(-1), {
    role: 'tool',
    tool_call_id: (runner.messages.at(-2) as { tool_calls: Array<{ id: string }> }).tool_calls[0].id,
    content: '{"celsius":31}',
  });
  const followUp = await client.chat.completions.create({ model: 'tiny-chat', messages: runner.messages, max_tokens: 8 });
  t.type(followUp.choices[0].message.content, 'string', 'the model answers after the tool result');
});

t.test('chat: parse with a zod response format', async (t) => {
  for (let i = 0; i < 2; i++) {
    const completion = await client.chat.completions.parse({
      model: 'tiny-chat',
      messages: [{ role: 'user', content: 'A person.' }],
      response_format: zodResponseFormat(Person, 'person'),
      max_tokens: 300,
    });
    t.ok(Person.safeParse(completion.choices[0].message.parsed).success, JSON.stringify(completion.choices[0].message.parsed));
  }
});

t.test('completions: create and stream', async (t) => {
  const completion = await client.completions.create({ model: 'tiny-chat', prompt: 'Once', max_tokens: 8, temperature: 0 });
  let streamed = '';
  for await (const chunk of await client.completions.create({
    model: 'tiny-chat',
    prompt: 'Once',
    max_tokens: 8,
    temperature: 0,
    stream: true,
  }))
    streamed += chunk.choices[0]?.text ?? '';
  t.equal(streamed, completion.choices[0].text);
});

t.test('responses: create, the streaming helper, parse with a zod text format', async (t) => {
  const response = await client.responses.create({ model: 'tiny-chat', input: 'Hello', max_output_tokens: 16, temperature: 0 });
  const stream = client.responses.stream({ model: 'tiny-chat', input: 'Hello', max_output_tokens: 16, temperature: 0 });
  let deltas = '';
  stream.on('response.output_text.delta', (event) => (deltas += event.delta));
  const final = await stream.finalResponse();
  t.equal(deltas, response.output_text);
  t.equal(final.output_text, response.output_text);

  const parsed = await client.responses.parse({
    model: 'tiny-chat',
    input: 'A person.',
    text: { format: zodTextFormat(Person, 'person') },
    max_output_tokens: 300,
  });
  t.ok(Person.safeParse(parsed.output_parsed).success, JSON.stringify(parsed.output_parsed));
});

t.test('embeddings: one input and several, float and base64 alike', async (t) => {
  const floats = await client.embeddings.create({ model: 'tiny-embed', input: ['a', 'b'] });
  t.equal(floats.data.length, 2);
  t.equal(floats.data[0].embedding.length, 32);
  // The client asks for base64 by default and decodes it itself.
  const decoded = await client.embeddings.create({ model: 'tiny-embed', input: 'a' });
  t.same(
    decoded.data[0].embedding.map((v) => v.toFixed(5)),
    floats.data[0].embedding.map((v) => v.toFixed(5)),
  );
});
