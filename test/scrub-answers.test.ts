// Scrubbing a model's answer (SPEC "Scrubbing", output side): streamed answers keep streaming, a value split across
// pieces anywhere is still replaced, the answer shares the prompt's placeholders, tool-call arguments are scrubbed,
// and `scrub.output` turns it off. The engine is a stand-in that says what the test tells it to, because what is
// tested is what the HTTP layer does with an answer, whatever model produced it.
import { createHash } from 'node:crypto';
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import type { ToolCall } from '../daemon/engines/index.js';
import { luhnValid } from '../daemon/scrub/index.js';
import { startStandInApp, type ScriptedEngine } from './helpers/app.js';

function withLuhn(prefix: string): string {
  for (let d = 0; d <= 9; d++) if (luhnValid(prefix + d)) return prefix + d;
  throw new Error('unreachable');
}
const nid = withLuhn('101234567');
const nid2 = withLuhn('109876543');
const iban = 'SA03 8000 0000 6080 1016 7519';

/** What the engine says next: its pieces, tool calls, and an optional pause after a given piece. */
const script: { pieces: string[]; toolCalls: ToolCall[]; pauseAfter?: number; resume?: Promise<void> } = { pieces: [], toolCalls: [] };
/** The last prompt the engine was given. */
let seenPrompt = '';

const teller: ScriptedEngine = {
  async close() {},
  async chat(_model, req, { onText, onUsage }) {
    seenPrompt = req.messages.map((m) => m.content).join('\n');
    for (const [i, piece] of script.pieces.entries()) {
      onText(piece);
      await new Promise((r) => setImmediate(r));
      if (i === script.pauseAfter) await script.resume;
    }
    const usage = { promptTokens: 1, completionTokens: script.pieces.length };
    onUsage?.(usage);
    return {
      content: script.pieces.join(''),
      toolCalls: script.toolCalls,
      finishReason: script.toolCalls.length ? 'tool_calls' : 'stop',
      usage,
    };
  },
};

async function streamed(client: OpenAI, prompt = 'hi'): Promise<string> {
  const stream = await client.chat.completions.create({ model: 'teller', messages: [{ role: 'user', content: prompt }], stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
  return text;
}

t.test('answers are scrubbed by default, streamed or not, wherever the pieces are cut', async (t) => {
  const { baseURL, secret } = await startStandInApp(t, { teller: { engine: teller } });
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  const answer = `رقم هويتك ${nid} والآيبان ${iban}.`;
  const expected = 'رقم هويتك [NATIONAL_ID] والآيبان [IBAN].';

  script.pieces = [answer];
  const buffered = await client.chat.completions.create({ model: 'teller', messages: [{ role: 'user', content: 'hi' }] });
  t.equal(buffered.choices[0]?.message.content, expected);

  script.pieces = [...answer];
  t.equal(await streamed(client), expected, 'one character per piece');
  for (let cut = 1; cut < answer.length; cut++) {
    script.pieces = [answer.slice(0, cut), answer.slice(cut)];
    const text = await streamed(client);
    if (text !== expected) {
      t.fail(`cut at ${cut}: ${JSON.stringify(text)}`);
      return;
    }
  }
  t.pass('every cut point of the answer gives the same scrubbed text');
});

t.test('a streamed answer keeps streaming: text before a value is sent before the answer ends', async (t) => {
  const { baseURL, secret } = await startStandInApp(t, { teller: { engine: teller } });
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  let release!: () => void;
  let timedOut = false;
  script.resume = new Promise<void>((resolve) => {
    release = resolve;
    // Bounded: if the text were buffered, the engine goes on after 10 s and the assertion below fails.
    setTimeout(() => {
      timedOut = true;
      resolve();
    }, 10_000).unref();
  });
  script.pieces = ['Here is your summary, ', 'first part done. ', 'Your ID: ', nid.slice(0, 4), nid.slice(4), ' end'];
  script.pauseAfter = 1;
  t.teardown(() => {
    script.pauseAfter = undefined;
    release();
  });
  const stream = await client.chat.completions.create({ model: 'teller', messages: [{ role: 'user', content: 'hi' }], stream: true });
  let text = '';
  let seenBeforeEnd = '';
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    if (!seenBeforeEnd && text.includes('first part done.')) {
      seenBeforeEnd = text;
      release();
    }
  }
  t.notOk(timedOut, 'the client saw the first pieces while the engine was still generating');
  t.match(seenBeforeEnd, /^Here is your summary, first part done\./);
  t.equal(text, 'Here is your summary, first part done. Your ID: [NATIONAL_ID] end');
});

t.test("the answer shares the prompt's placeholders; tool-call arguments are scrubbed", async (t) => {
  const { baseURL, secret } = await startStandInApp(t, { teller: { engine: teller } });
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  script.pieces = [`${nid2} is new, ${nid} was in the question`];
  const text = await streamed(client, `check ${nid}`);
  t.equal(seenPrompt, 'check [NATIONAL_ID]', 'the engine never saw the value');
  t.equal(text, '[NATIONAL_ID_2] is new, [NATIONAL_ID] was in the question');

  script.pieces = [];
  script.toolCalls = [{ id: 'call_1', name: 'pay', arguments: JSON.stringify({ iban: iban.replace(/ /g, ''), amount: 100 }) }];
  t.teardown(() => (script.toolCalls = []));
  const called = await client.chat.completions.create({
    model: 'teller',
    messages: [{ role: 'user', content: 'pay' }],
    tools: [{ type: 'function', function: { name: 'pay', parameters: { type: 'object' } } }],
  });
  const call = called.choices[0]?.message.tool_calls?.[0];
  t.equal(call?.type === 'function' ? call.function.arguments : undefined, '{"iban":"[IBAN]","amount":100}');
  const stream = await client.chat.completions.create({
    model: 'teller',
    messages: [{ role: 'user', content: 'pay' }],
    tools: [{ type: 'function', function: { name: 'pay', parameters: { type: 'object' } } }],
    stream: true,
  });
  let args = '';
  for await (const chunk of stream) args += chunk.choices[0]?.delta.tool_calls?.[0]?.function?.arguments ?? '';
  t.equal(args, '{"iban":"[IBAN]","amount":100}', 'streamed tool calls too');
});

t.test('scrub.output false passes answers as the model wrote them (prompts are still scrubbed)', async (t) => {
  const { baseURL, secret } = await startStandInApp(t, { teller: { engine: teller } }, {}, { SOVEREIGN_SCRUB_OUTPUT: 'false' });
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  script.pieces = [`id ${nid}`];
  t.equal(await streamed(client, `mine is ${nid2}`), `id ${nid}`);
  t.equal(seenPrompt, 'mine is [NATIONAL_ID]');
});

t.test('a streamed answer is audited when it ends: the digest of what was sent, both redaction counts, its leaf', async (t) => {
  const { baseURL, secret, audit } = await startStandInApp(t, { teller: { engine: teller } });
  script.pieces = [`your id is ${nid2}`, ' and that is all'];
  await auditedStream(t, baseURL, secret, audit);
  // A long answer's events are hashed in several parts along the way: the digest is still that of all that was sent.
  script.pieces = [`your id is ${nid2}`, ...Array.from({ length: 400 }, (_, i) => ` line ${i} of a long answer, in many pieces.`)];
  t.ok((await auditedStream(t, baseURL, secret, audit)) > 16 * 1024, 'more than 16 K characters streamed');
});

async function auditedStream(
  t: Test,
  baseURL: string,
  secret: string,
  audit: NonNullable<Awaited<ReturnType<typeof startStandInApp>>['audit']>,
): Promise<number> {
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'teller', messages: [{ role: 'user', content: `mine is ${nid}` }], stream: true }),
  });
  const text = await res.text();
  const match = /\n: x-audit-leaf (\d+)\n\ndata: \[DONE\]\n\n$/.exec(text);
  t.ok(match, 'the leaf is named just before [DONE]');
  const sent = text.slice(0, match!.index + 1);
  const entry = JSON.parse(audit.log.entry(Number(match![1]))!.toString()) as Record<string, unknown>;
  t.match(entry, {
    route: '/v1/chat/completions',
    status: 200,
    model: 'teller',
    redactions: { NATIONAL_ID: 1, IQAMA: 0, IBAN: 0, CARD: 0 },
    answer_redactions: { NATIONAL_ID: 1, IQAMA: 0, IBAN: 0, CARD: 0 },
    response_sha256: createHash('sha256').update(sent).digest('hex'),
    request_id: res.headers.get('x-request-id'),
  });
  t.notMatch(audit.log.entry(Number(match![1]))!.toString(), new RegExp(`${nid}|${nid2}`), 'no value in the log');
  return sent.length;
}
