// Texts that are JSON (a structured answer, tool-call arguments) are read as the JSON parser that will read them does:
// an escape (\u0031, \u0661, \n, \u200b) is the character it stands for, so a value written with escapes is still
// found and replaced, and the text still parses. Through the module (whole and streamed, every cut point) and through
// HTTP with the openai client, both ways: what a model answers, and what a request sends to a model. A tool call's id
// and name in an answer are scrubbed like its arguments.
import t from 'tap';
import OpenAI from 'openai';
import type { ChatRequest, ToolCall } from '../daemon/engines/index.js';
import { JsonPosition, luhnValid, ScrubSession, StreamScrubber } from '../daemon/scrub/index.js';
import { startStandInApp, type ScriptedEngine } from './helpers/app.js';

function withLuhn(prefix: string): string {
  for (let d = 0; d <= 9; d++) if (luhnValid(prefix + d)) return prefix + d;
  throw new Error('unreachable');
}
const nid = withLuhn('101234567');
const iqama = withLuhn('234567890');
const card = withLuhn('411111111111111');
const iban = 'SA0380000000608010167519';
const VALUES = [nid, iqama, card, iban];

/** Every character of `s` as a JSON \u escape. */
const escaped = (s: string) => [...s].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('');
const arabicIndic = (s: string) => s.replace(/[0-9]/g, (d) => String.fromCharCode(0x0660 + Number(d)));

/** JSON texts that hold a value only once their escapes are read. */
const holding: string[] = [
  `{"id":"${escaped(nid)}"}`,
  `{"id":"${escaped(arabicIndic(iqama))}"}`,
  `{"id":"${nid.slice(0, 5)}\\n${nid.slice(5)}"}`,
  `{"id":"${nid.slice(0, 5)}\\r\\n${nid.slice(5)}"}`,
  `{"card":"${card.slice(0, 4)}\\t${card.slice(4, 8)}\\t${card.slice(8, 12)}\\t${card.slice(12)}"}`,
  `{"id":"${nid.slice(0, 5)}\\u200b${nid.slice(5)}"}`,
  `{"id":"${nid.slice(0, 5)}\\u00a0${nid.slice(5)}"}`,
  `{"iban":"${escaped('SA')}${iban.slice(2)}"}`,
  `{"iban":"SA03 8000\\n0000 6080 1016 7519"}`,
  `{"note":"said \\"${escaped(nid.slice(0, 4))}${nid.slice(4)}\\" twice","n":[1,2]}`,
  `["${escaped(nid)}","${escaped(card)}"]`,
];

/** Values a parsed JSON value still holds, by the scrubber and written plainly. */
function valuesIn(value: unknown): string[] {
  const text = JSON.stringify(value);
  const strings: string[] = [];
  JSON.parse(text, (_key, v: unknown) => (typeof v === 'string' && strings.push(v), v));
  return [
    ...strings.flatMap((s) => new ScrubSession().find(s).map((r) => r.type)),
    ...VALUES.filter((v) => strings.some((s) => s.replace(/\D/g, '').includes(v.replace(/\D/g, '')))),
  ];
}

/** A JSON text streamed through a scrubber in the given pieces. */
function streamed(pieces: string[]): string {
  const stream = new StreamScrubber(new ScrubSession(), undefined, new JsonPosition());
  return pieces.map((p) => stream.push(p)).join('') + stream.end();
}

t.test('a value written with JSON escapes is found, and the text still parses', async (t) => {
  for (const text of holding) {
    t.not(JSON.stringify(valuesIn(JSON.parse(text))), '[]', `${text} holds a value once parsed`);
    const scrubbed = new ScrubSession().scrubJson(text);
    let parsed: unknown;
    t.doesNotThrow(() => (parsed = JSON.parse(scrubbed)), `${scrubbed} parses`);
    t.same(valuesIn(parsed), [], `${text} → ${scrubbed}`);
  }
  // Escapes that hold no value are left exactly as they were; so are escapes that are no JSON (left as written).
  for (const text of ['{"a":"\\u0041\\n12","b":"\\"x\\"\\\\u0031"}', `{"n":"10123\\u0020\\u0020\\u002045672"}`, '"\\x31\\u12', '"\\']) {
    t.equal(new ScrubSession().scrubJson(text), text, `${text} unchanged`);
  }
});

t.test('streamed, a JSON text gives what scrubbing it whole gives, wherever it is cut', async (t) => {
  let cases = 0;
  for (const text of holding) {
    const whole = new ScrubSession().scrubJson(text);
    for (let cut = 0; cut <= text.length; cut++) {
      cases++;
      const out = streamed([text.slice(0, cut), text.slice(cut)]);
      if (out !== whole) {
        t.fail(`${text} cut at ${cut}: ${out}, expected ${whole}`);
        return;
      }
    }
    t.equal(streamed(text.split('')), whole, `${text} one unit at a time`);
  }
  t.pass(`${cases} two-piece splits`);
});

t.test('property: random JSON with values written with random escapes, cut into random pieces', async (t) => {
  let seed = 5252;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const pick = <T>(items: T[]): T => items[rand(items.length)];
  const joiners = ['', '', '', ' ', '\\n', '\\t', '\\u200b', '\\u00a0', '-'];
  /** A value's characters, each written plainly or as an escape, in ASCII or Arabic-Indic digits. */
  const render = (value: string) => {
    const digits = rand(3) === 0 ? arabicIndic(value) : value;
    return [...digits].map((c) => (rand(2) ? escaped(c) : c) + (rand(6) === 0 ? pick(joiners) : '')).join('');
  };
  const fillers = ['note', 'a \\"quoted\\" word', '\\\\', 'x\\u0041', '12', '', 'رقم', '\\n', '\\/'];
  let mismatches = 0;
  let leaks = 0;
  for (let round = 0; round < 600; round++) {
    const fields = Array.from({ length: 1 + rand(4) }, (_, k) => {
      const text = rand(2) ? `${pick(fillers)} ${render(pick(VALUES))} ${pick(fillers)}` : pick(fillers);
      return `"f${k}":"${text}"`;
    });
    const text = `{${fields.join(',')}}`;
    const whole = new ScrubSession().scrubJson(text);
    const left = valuesIn(JSON.parse(whole));
    if (left.length && leaks++ < 3) t.fail(`${text} → ${whole} still holds ${left.join(', ')}`);
    const pieces: string[] = [];
    for (let at = 0; at < text.length;) {
      const length = 1 + rand(9);
      pieces.push(text.slice(at, at + length));
      at += length;
    }
    const out = streamed(pieces);
    if (out !== whole && mismatches++ < 3) t.fail(`${JSON.stringify(pieces)} → ${out}, expected ${whole}`);
  }
  t.equal(leaks, 0, '600 random JSON texts: no value left once parsed');
  t.equal(mismatches, 0, 'and streamed in random pieces, the same as whole');
});

/** What the engine answers next, and the last request it was given. */
let answer: { content: string; toolCalls: ToolCall[] } = { content: '', toolCalls: [] };
let seen: ChatRequest | null = null;
const engine: ScriptedEngine = {
  async close() {},
  async chat(_model, request, { onText, onUsage }) {
    seen = request;
    for (const piece of answer.content.match(/[\s\S]{1,5}/g) ?? []) {
      onText(piece);
      await new Promise((resolve) => setImmediate(resolve));
    }
    const usage = { promptTokens: 1, completionTokens: 1 };
    onUsage?.(usage);
    return { content: answer.content, toolCalls: answer.toolCalls, finishReason: answer.toolCalls.length ? 'tool_calls' : 'stop', usage };
  },
};

t.test('through HTTP: structured answers and tool calls written with escapes reach the client scrubbed', async (t) => {
  const { baseURL, secret } = await startStandInApp(t, { m: { engine } });
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  const messages = [{ role: 'user' as const, content: 'answer in JSON' }];
  for (const content of holding.slice(0, 4)) {
    answer = { content, toolCalls: [] };
    const buffered = await client.chat.completions.create({ model: 'm', messages, response_format: { type: 'json_object' } });
    t.same(valuesIn(JSON.parse(buffered.choices[0].message.content!)), [], `buffered: ${buffered.choices[0].message.content}`);
    const stream = await client.chat.completions.create({ model: 'm', messages, response_format: { type: 'json_object' }, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    t.same(valuesIn(JSON.parse(text)), [], `streamed: ${text}`);
  }

  answer = { content: '', toolCalls: [{ id: `call_${nid}`, name: `lookup${iqama}`, arguments: `{"id":"${escaped(nid)}"}` }] };
  const tools = [{ type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object' } } }];
  const called = await client.chat.completions.create({ model: 'm', messages, tools });
  const call = called.choices[0].message.tool_calls![0];
  t.equal(call.type === 'function' && call.function.arguments, '{"id":"[NATIONAL_ID]"}', 'arguments');
  t.equal(call.id, 'call_[NATIONAL_ID]', "the call's id");
  t.equal(call.type === 'function' && call.function.name, 'lookup[IQAMA]', "the function's name");
  const stream = await client.chat.completions.create({ model: 'm', messages, tools, stream: true });
  const deltas: string[] = [];
  for await (const chunk of stream) for (const c of chunk.choices[0]?.delta.tool_calls ?? []) deltas.push(JSON.stringify(c));
  t.same(
    deltas.flatMap((d) => VALUES.filter((v) => d.includes(v))),
    [],
    'streamed tool calls too',
  );
  t.match(deltas.join(''), /call_\[NATIONAL_ID\]/);
});

t.test("through HTTP: a request's tool-call arguments written with escapes reach the model scrubbed", async (t) => {
  const { baseURL, secret } = await startStandInApp(t, { m: { engine } });
  const client = new OpenAI({ apiKey: secret, baseURL, maxRetries: 0 });
  answer = { content: 'ok', toolCalls: [] };
  await client.chat.completions.create({
    model: 'm',
    messages: [
      { role: 'user', content: 'look me up' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: `{"id":"${escaped(arabicIndic(nid))}"}` } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'found' },
    ],
  });
  const args = seen!.messages[1].toolCalls![0].arguments;
  t.same(JSON.parse(args), { id: '[NATIONAL_ID]' }, args);
});
