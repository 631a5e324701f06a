// @langchain/openai against the daemon (tiny real models), as a LangChain user writes it: ChatOpenAI with only the
// base URL and key changed, on chat completions (its default) and on the Responses API (useResponsesApi), for invoke,
// stream, tools bound and called, withStructuredOutput, and OpenAIEmbeddings.
import t from 'tap';
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { tool } from '@langchain/core/tools';
import { z } from 'zod';
import { startClientDaemon } from './helpers/client-daemon.js';

const { baseURL, apiKey } = await startClientDaemon(t);
const connection = { apiKey, configuration: { baseURL }, maxRetries: 0 };
const weather = tool(async ({ city }) => `31 degrees in ${city}`, {
  name: 'weather',
  description: 'The weather in a city',
  schema: z.object({ city: z.enum(['Riyadh', 'Jeddah']) }),
});
const Person = z.object({ name: z.enum(['Huda', 'Omar']), age: z.number().int(), score: z.number() });

for (const useResponsesApi of [false, true]) {
  const api = useResponsesApi ? 'Responses API' : 'chat completions';
  const llm = new ChatOpenAI({ model: 'tiny-chat', maxTokens: 16, temperature: 0, useResponsesApi, ...connection });

  t.test(`${api}: invoke and stream give the same text`, async (t) => {
    const answer = await llm.invoke('Hello');
    t.ok(answer.text.length > 0, 'text');
    t.ok((answer.usage_metadata?.input_tokens ?? 0) > 0, 'usage');
    let streamed = '';
    for await (const chunk of await llm.stream('Hello')) streamed += chunk.text;
    t.equal(streamed, answer.text);
  });

  t.test(`${api}: a bound tool is called with valid arguments, and its result is answered`, async (t) => {
    // Room for the call's JSON, token by token.
    const withTools = new ChatOpenAI({ model: 'tiny-chat', maxTokens: 60, temperature: 0, useResponsesApi, ...connection }).bindTools(
      [weather],
      {
        tool_choice: 'weather',
      },
    );
    const call = await withTools.invoke('What is the weather?');
    t.equal(call.tool_calls?.length, 1);
    const [toolCall] = call.tool_calls!;
    t.equal(toolCall.name, 'weather');
    t.ok(['Riyadh', 'Jeddah'].includes(toolCall.args.city as string), JSON.stringify(toolCall.args));
    const result = await weather.invoke(toolCall);
    const answer = await llm
      .bindTools([weather], { tool_choice: 'none' })
      .invoke([{ role: 'user', content: 'What is the weather?' }, call, result]);
    t.ok(answer.text.length > 0, 'an answer after the tool result');
  });

  t.test(`${api}: withStructuredOutput parses into the schema every time`, async (t) => {
    const structured = new ChatOpenAI({ model: 'tiny-chat', maxTokens: 200, useResponsesApi, ...connection }).withStructuredOutput(Person);
    for (let i = 0; i < 2; i++) {
      const person = await structured.invoke('Describe a person.');
      t.ok(Person.safeParse(person).success, JSON.stringify(person));
    }
  });
}

t.test('OpenAIEmbeddings: a query and documents, unit vectors of the model width', async (t) => {
  const embeddings = new OpenAIEmbeddings({ model: 'tiny-embed', ...connection });
  const query = await embeddings.embedQuery('مرحبا');
  t.equal(query.length, 32);
  t.ok(Math.abs(Math.hypot(...query) - 1) < 1e-4);
  const documents = await embeddings.embedDocuments(['first', 'second', 'third']);
  t.equal(documents.length, 3);
});
