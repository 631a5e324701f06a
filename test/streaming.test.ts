// The HTTP layer's streaming path: SSE framing, [DONE], include_usage, and our headers on a streamed response.
// The engine here is a scripted stand-in implementing the ChatEngine interface, because this test is about the
// HTTP layer only; the real llama.cpp engine has its own tests that run it for real.
import http from 'node:http';
import t from 'tap';
import OpenAI from 'openai';
import { startStandInApp, type ScriptedEngine } from './helpers/app.js';
import { request } from './helpers/http.js';

/** Replies with the last user message, one word per piece, and counts words as tokens. */
const scripted: ScriptedEngine = {
  async close() {},
  async chat(_model, req, { onText, signal, onUsage }) {
    const words = (req.messages.at(-1)?.content ?? '').split(' ');
    for (const [i, w] of words.entries()) {
      if (signal.aborted) throw new Error('aborted');
      onText(i ? ` ${w}` : w);
      await new Promise((r) => setImmediate(r));
    }
    const usage = { promptTokens: words.length, completionTokens: words.length };
    onUsage?.(usage);
    return { content: words.join(' '), toolCalls: [], finishReason: 'stop', usage };
  },
};

/** Words the slow engine produced in its last call. */
let slowWords = 0;

/** Emits a word every 5 ms until aborted or `maxTokens` words; reports usage however it ends. */
const slow: ScriptedEngine = {
  async close() {},
  async chat(_model, req, { onText, signal, onUsage }) {
    let words = 0;
    slowWords = 0;
    try {
      while (words < (req.maxTokens ?? 100)) {
        if (signal.aborted) throw new Error('aborted');
        onText('word ');
        words++;
        slowWords = words;
        await new Promise((r) => setTimeout(r, 5));
      }
      return { content: 'word '.repeat(words), toolCalls: [], finishReason: 'length', usage: { promptTokens: 1, completionTokens: words } };
    } finally {
      onUsage?.({ promptTokens: 1, completionTokens: words });
    }
  },
};

for (const posture of ['device', 'cloud'] as const) {
  t.test(`${posture}: a streamed chat completion`, async (t) => {
    const env = posture === 'cloud' ? { SOVEREIGN_TLS_CERT: '/unused', SOVEREIGN_TLS_KEY: '/unused' } : {};
    const { baseURL, secret } = await startStandInApp(
      t,
      { scripted: { engine: scripted }, slow: { engine: slow, contextTokens: 8000 } },
      { posture, region: 'sa-dammam-1', ...(posture === 'cloud' ? { host: '127.0.0.1' } : {}) },
      env,
    );

    const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
    const { data: stream, response } = await client.chat.completions
      .create({
        model: 'scripted',
        messages: [{ role: 'user', content: 'salam from the other side' }],
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    t.equal(response.headers.get('content-type'), 'text/event-stream; charset=utf-8');
    t.equal(response.headers.get('x-region'), 'sa-dammam-1');
    t.equal(response.headers.get('x-sovereign'), 'true');
    t.match(response.headers.get('x-request-id'), /^req_/);
    if (posture === 'cloud') {
      t.equal(response.headers.get('x-ratelimit-limit-requests'), '100');
      t.equal(response.headers.get('x-ratelimit-limit-tokens'), '10000');
    } else t.equal(response.headers.get('x-ratelimit-limit-requests'), null);

    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null = null;
    for await (const chunk of stream) {
      t.equal(chunk.object, 'chat.completion.chunk');
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    t.equal(text, 'salam from the other side');
    t.equal(finish, 'stop');
    t.same(usage, { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 });

    const raw = await request(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'scripted', messages: [{ role: 'user', content: 'a b' }], stream: true }),
    });
    t.match(raw.text, /^data: \{.*\n\n/);
    t.ok(raw.text.endsWith('data: [DONE]\n\n'), 'ends with [DONE]');
    t.notMatch(raw.text, /"usage"/, 'no usage chunk unless asked');

    const buffered = await client.chat.completions.create({ model: 'scripted', messages: [{ role: 'user', content: 'one two' }] });
    t.equal(buffered.choices[0]?.message.content, 'one two');
    t.same(buffered.usage, { prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 });

    // What reaches the engine is scrubbed: the echo engine replies with exactly what it was given.
    const echoed = await client.chat.completions.create({
      model: 'scripted',
      messages: [{ role: 'user', content: 'هويتي ١٠١٢٣٤٥٦٧٢ و IBAN SA03 8000 0000 6080 1016 7519 شكرا' }],
    });
    t.equal(echoed.choices[0]?.message.content, 'هويتي [NATIONAL_ID] و IBAN [IBAN] شكرا', 'the engine never saw the values');
    const streamedEcho = await client.chat.completions.create({
      model: 'scripted',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'card 4111 1111 1111 1111 ok' }] }],
      stream: true,
    });
    let streamedText = '';
    for await (const c of streamedEcho) streamedText += c.choices[0]?.delta.content ?? '';
    t.equal(streamedText, 'card [CARD] ok', 'text parts are scrubbed too');

    // Content nested far deeper than any real message: counted without walking it, so never a 500.
    const deep = `${'['.repeat(100_000)}${']'.repeat(100_000)}`;
    const nested = await request(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: `{"model":"scripted","messages":[{"role":"user","content":[{"type":"text","text":"deep","x":${deep}}]}]}`,
    });
    t.ok(nested.status < 500, `deeply nested content is not a server error (${nested.status})`);

    if (posture !== 'cloud') return;
    // Spend part of the bucket first, so refunds and charges both show (a full bucket hides a refund).
    await client.chat.completions.create({ model: 'slow', messages: [{ role: 'user', content: 'x' }], max_tokens: 3000 });
    const remaining = async () =>
      Number(
        (await request(`${baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } })).headers['x-ratelimit-remaining-tokens'],
      );
    const beforeAsked = Date.now();
    const before = await remaining();
    const beforeAnswered = Date.now();
    await new Promise<void>((resolve, reject) => {
      const req = http.request(`${baseURL}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      });
      let chunks = 0;
      req.on('response', (res) =>
        res.on('data', () => {
          if (++chunks === 20) {
            req.destroy();
            resolve();
          }
        }),
      );
      req.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' ? resolve() : reject(err)));
      req.end(JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: 'go' }], max_tokens: 5000, stream: true }));
    });
    await new Promise((r) => setTimeout(r, 100));
    const afterAsked = Date.now();
    const after = await remaining();
    const afterAnswered = Date.now();
    // The bucket refilled between the server's two readings, which lie somewhere in these windows (10,000 a minute).
    const refill = (ms: number) => (ms * 10_000) / 60_000;
    const [least, most] = [refill(afterAsked - beforeAnswered), refill(afterAnswered - beforeAsked)];
    const charged = slowWords + 1;
    t.ok(slowWords >= 10, `the engine was stopped mid-way (${slowWords} words)`);
    t.ok(
      // A few tokens of slack besides; the charge is about 20, a reservation 5,000.
      after >= before - charged + least - 4 && after <= before - charged + most + 4,
      `an abandoned call is charged what it used (${charged} tokens), not its reservation and not nothing (${before} → ${after}, refill ${least.toFixed(0)}–${most.toFixed(0)})`,
    );
  });
}

/** Opens the burst engine's gate: it goes on once the client has the first turn's text (false if it waited 5 s). */
let openGate: () => void = () => {};
let gateOpened: boolean | null = null;

/** Hands on three pieces in one turn (an IBAN cut between two of them), then, once let through, two in another. */
const burst: ScriptedEngine = {
  async close() {},
  async chat(_model, _req, { onText, onUsage }) {
    onText('IBAN SA03 8000 ');
    onText('0000 6080 1016 7519');
    // Ends in Arabic letters: no value starts with them, so the scrubber holds none of this turn back.
    onText(' شكراً');
    gateOpened = await new Promise<boolean>((resolve) => {
      openGate = () => resolve(true);
      setTimeout(() => resolve(false), 5000).unref();
    });
    onText(' وهذا');
    onText(' كل شيء.');
    const usage = { promptTokens: 1, completionTokens: 5 };
    onUsage?.(usage);
    return { content: '', toolCalls: [], finishReason: 'stop', usage };
  },
};

t.test('pieces handed on in one turn leave as one event, scrubbed together; nothing waits for the next turn', async (t) => {
  const { baseURL, secret } = await startStandInApp(t, { burst: { engine: burst } }, { posture: 'device', region: 'sa-dammam-1' });
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  const stream = await client.chat.completions.create({ model: 'burst', messages: [{ role: 'user', content: 'go' }], stream: true });
  const contents: string[] = [];
  for await (const chunk of stream) {
    const content = chunk.choices[0]?.delta.content;
    if (!content) continue;
    contents.push(content);
    // The first turn's text has arrived while the engine still waits: it was not held for the rest.
    if (contents.length === 1) openGate();
  }
  t.equal(gateOpened, true, 'the first turn’s text reached the client before the engine went on');
  t.same(contents, ['IBAN [IBAN] شكراً', ' وهذا كل شيء.'], 'one event per turn, the IBAN cut between two pieces scrubbed');
});
