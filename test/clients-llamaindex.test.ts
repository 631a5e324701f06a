// @llamaindex/openai against the daemon (tiny real models), as a LlamaIndex user writes it: the OpenAI LLM with only
// the base URL and key changed (chat, streamed chat, completion, a tool call, structured output) and OpenAIEmbedding.
import t from 'tap';
import { OpenAI, OpenAIEmbedding } from '@llamaindex/openai';
import { tool } from '@llamaindex/core/tools';
import { z } from 'zod';
import { startClientDaemon } from './helpers/client-daemon.js';

/** A message's content as text (LlamaIndex types it as text or content parts). */
const textOf = (content: unknown): string => (typeof content === 'string' ? content : JSON.stringify(content));

const { baseURL, apiKey } = await startClientDaemon(t);
const llm = new OpenAI({ model: 'tiny-chat', apiKey, baseURL, maxTokens: 60, temperature: 0, maxRetries: 0 });

t.test('chat and streamed chat give the same text', async (t) => {
  const messages = [{ role: 'user' as const, content: 'Hello' }];
  const answer = await llm.chat({ messages });
  t.ok(textOf(answer.message.content).length > 0);
  let streamed = '';
  for await (const chunk of await llm.chat({ messages, stream: true })) streamed += chunk.delta;
  t.equal(streamed, answer.message.content);
});

t.test('complete', async (t) => {
  const { text } = await llm.complete({ prompt: 'Once upon a time' });
  t.ok(text.length > 0);
});

t.test('a required tool comes back as a tool call with valid input', async (t) => {
  const weather = tool({
    name: 'weather',
    description: 'The weather in a city',
    parameters: z.object({ city: z.enum(['Riyadh', 'Jeddah']) }),
    execute: ({ city }) => `31 degrees in ${city}`,
  });
  const answer = await llm.chat({
    messages: [{ role: 'user', content: 'Weather?' }],
    tools: [weather],
    additionalChatOptions: { tool_choice: 'required' },
  });
  const calls = (answer.message.options as { toolCall?: Array<{ name: string; input: string }> }).toolCall ?? [];
  t.equal(calls.length, 1);
  t.equal(calls[0]?.name, 'weather');
  t.ok(['Riyadh', 'Jeddah'].includes((JSON.parse(calls[0].input) as { city: string }).city), calls[0]?.input);
});

t.test('structured output with a zod responseFormat parses', async (t) => {
  const Person = z.object({ name: z.enum(['Huda', 'Omar']), age: z.number().int() });
  const structured = new OpenAI({ model: 'tiny-chat', apiKey, baseURL, maxTokens: 200, maxRetries: 0 });
  for (let i = 0; i < 2; i++) {
    const answer = await structured.chat({ messages: [{ role: 'user', content: 'A person.' }], responseFormat: Person });
    const text = textOf(answer.message.content);
    t.ok(Person.safeParse(JSON.parse(text)).success, text);
  }
});

t.test('OpenAIEmbedding: one text and several', async (t) => {
  const embedding = new OpenAIEmbedding({ model: 'tiny-embed', apiKey, baseURL });
  t.equal((await embedding.getTextEmbedding('hello')).length, 32);
  t.equal((await embedding.getTextEmbeddings(['a', 'b'])).length, 2);
});
