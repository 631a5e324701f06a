// The Vercel AI SDK (ai) against the daemon (tiny real models), through both of its providers a user would pick:
// @ai-sdk/openai-compatible (chat completions) and @ai-sdk/openai, whose default `openai(id)` is the Responses API
// (and `openai.chat(id)` chat completions): generateText, streamText, tools (a call, and a loop that answers after
// the tool ran), generateObject, embed and embedMany.
import t from 'tap';
import { embed, embedMany, generateObject, generateText, stepCountIs, streamText, tool, type LanguageModel } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { startClientDaemon } from './helpers/client-daemon.js';

const { baseURL, apiKey } = await startClientDaemon(t);
// supportsStructuredOutputs: the daemon enforces json_schema (the provider's default asks for json_object only).
const compatible = createOpenAICompatible({ name: 'sovereign', baseURL, apiKey, supportsStructuredOutputs: true, includeUsage: true });
const openai = createOpenAI({ baseURL, apiKey });

const weather = tool({
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.enum(['Riyadh', 'Jeddah']) }),
  execute: async ({ city }) => ({ city, celsius: 31 }),
});
const Person = z.object({ name: z.enum(['Huda', 'Omar']), age: z.number().int(), score: z.number() });

const models: Array<[string, LanguageModel]> = [
  ['openai-compatible', compatible('tiny-chat')],
  ['openai (Responses API)', openai('tiny-chat')],
  ['openai.chat', openai.chat('tiny-chat')],
];

for (const [label, model] of models) {
  t.test(`${label}: generateText and streamText give the same text and usage`, async (t) => {
    const options = { model, prompt: 'Hello', maxOutputTokens: 20, temperature: 0, maxRetries: 0 };
    const generated = await generateText(options);
    t.ok(generated.text.length > 0);
    t.ok((generated.usage.inputTokens ?? 0) > 0, 'input tokens');
    const streamed = streamText({ ...options, onError: ({ error }) => void t.fail(String(error)) });
    let text = '';
    for await (const piece of streamed.textStream) text += piece;
    t.equal(text, generated.text);
    t.equal((await streamed.usage).outputTokens, generated.usage.outputTokens);
  });

  t.test(`${label}: a required tool is called, runs, and the loop answers after it`, async (t) => {
    const called = await generateText({
      model,
      prompt: 'Weather?',
      tools: { weather },
      toolChoice: 'required',
      // Greedy, as the other clients' tool tests: a sampled call on the random model may spend its tokens on the
      // grammar's whitespace and be withheld at the length limit.
      temperature: 0,
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    t.equal(called.toolCalls.length, 1);
    const { city } = called.toolCalls[0].input as { city: string };
    t.ok(['Riyadh', 'Jeddah'].includes(city));
    t.same(called.toolResults[0]?.output, { city, celsius: 31 });

    const loop = await generateText({
      model,
      prompt: 'Weather?',
      tools: { weather },
      toolChoice: 'required',
      prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : {}),
      stopWhen: stepCountIs(2),
      temperature: 0,
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    t.equal(loop.steps.length, 2, 'a second step, after the tool result');
    t.ok(loop.text.length > 0);
  });

  t.test(`${label}: generateObject parses into the schema every time`, async (t) => {
    for (let i = 0; i < 2; i++) {
      const { object } = await generateObject({ model, schema: Person, prompt: 'Describe a person.', maxOutputTokens: 200, maxRetries: 0 });
      t.ok(Person.safeParse(object).success, JSON.stringify(object));
    }
  });
}

t.test('embed and embedMany through both providers', async (t) => {
  for (const model of [compatible.textEmbeddingModel('tiny-embed'), openai.embedding('tiny-embed')]) {
    const one = await embed({ model, value: 'hello', maxRetries: 0 });
    t.equal(one.embedding.length, 32);
    const many = await embedMany({ model, values: ['a', 'b', 'c'], maxRetries: 0 });
    t.equal(many.embeddings.length, 3);
    t.ok((many.usage.tokens ?? 0) > 0);
  }
});
