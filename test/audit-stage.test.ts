// The audit stage when the log cannot record (SPEC "Audit"): no response goes out unlogged. A buffered call is
// answered 503 audit_unavailable instead of its result, and so is a stream whose start cannot be recorded; a stream
// whose content has already gone out when its end cannot be recorded ends with an error event saying so. The log is made to refuse by closing it under the running app.
import t from 'tap';
import { startStandInApp, type ScriptedEngine } from './helpers/app.js';
import { fill, smallDisk, smallDiskUnavailable } from './helpers/small-disk.js';

const ANSWER = 'the answer that must not leave unlogged';
const speaker: ScriptedEngine = {
  async close() {},
  async chat(_model, _req, { onText, onUsage }) {
    onText(ANSWER);
    const usage = { promptTokens: 1, completionTokens: 1 };
    onUsage?.(usage);
    return { content: ANSWER, toolCalls: [], finishReason: 'stop', usage };
  },
};

async function call(baseURL: string, secret: string, stream: boolean): Promise<Response> {
  return fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'speaker', messages: [{ role: 'user', content: 'hello' }], stream }),
  });
}

t.test('a call the audit log cannot record gets 503 audit_unavailable, never its result', async (t) => {
  const { baseURL, secret, audit } = await startStandInApp(t, { speaker: { engine: speaker } });
  const ok = await call(baseURL, secret, false);
  t.equal(ok.status, 200, 'recorded while the log works');
  t.match(ok.headers.get('x-audit-leaf'), /^\d+$/);
  t.equal(ok.headers.get('x-audit-log'), audit.originName, 'and names the log it is in');
  t.match(await ok.text(), ANSWER);
  const streamed = await call(baseURL, secret, true);
  t.equal(streamed.headers.get('x-audit-log'), audit.originName, "a stream's headers name its log too");
  t.match(await streamed.text(), /: x-audit-leaf \d+\n\n/);

  await audit.log.close();
  const refused = await call(baseURL, secret, false);
  t.equal(refused.status, 503);
  t.equal(refused.headers.get('retry-after'), '5');
  t.equal(refused.headers.get('x-audit-leaf'), null, 'no leaf to name');
  t.equal(refused.headers.get('x-audit-log'), null, 'nor a log');
  t.match(refused.headers.get('x-request-id'), /^req_/);
  const body = await refused.text();
  t.notMatch(body, ANSWER, 'the result is withheld');
  t.match(JSON.parse(body), { error: { code: 'audit_unavailable', type: String, message: /audit log could not record/ } });
});

t.test('a stream whose start the log cannot record is refused with 503 audit_unavailable: not a byte of it leaves', async (t) => {
  const { baseURL, secret, audit } = await startStandInApp(t, { speaker: { engine: speaker } });
  await audit.log.close();
  const res = await call(baseURL, secret, true);
  t.equal(res.status, 503);
  t.equal(res.headers.get('retry-after'), '5');
  t.equal(res.headers.get('x-audit-leaf'), null, 'no leaf to name');
  const body = await res.text();
  t.notMatch(body, ANSWER, 'nothing of the answer');
  t.notMatch(body, /^data:/m, 'no event');
  t.match(JSON.parse(body), { error: { code: 'audit_unavailable', message: /audit log could not record/ } });
});

t.test('a stream whose end the log cannot record ends with an audit_unavailable event before [DONE]', async (t) => {
  let release = () => {};
  const released = new Promise<void>((resolve) => (release = resolve));
  const waiting: ScriptedEngine = {
    async close() {},
    async chat(_model, _req, { onText, onUsage }) {
      onText('first ');
      await released;
      onText(ANSWER);
      const usage = { promptTokens: 1, completionTokens: 2 };
      onUsage?.(usage);
      return { content: `first ${ANSWER}`, toolCalls: [], finishReason: 'stop', usage };
    },
  };
  const { baseURL, secret, audit } = await startStandInApp(t, { speaker: { engine: waiting } });
  const res = await call(baseURL, secret, true);
  t.equal(res.status, 200, 'the start was recorded: the stream began');
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  // The role chunk: the stream is under way (the answer's text may be held back a little by answer scrubbing).
  while (!text.includes('"role":"assistant"')) {
    const r = await reader.read();
    if (r.done) break;
    text += decoder.decode(r.value);
  }
  await audit.log.close();
  release();
  for (let r = await reader.read(); !r.done; r = await reader.read()) text += decoder.decode(r.value);
  t.notMatch(text, /x-audit-leaf/, 'no leaf is named');
  const events = text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice('data: '.length));
  t.equal(events.at(-1), '[DONE]');
  t.match(JSON.parse(events.at(-2)!), { error: { code: 'audit_unavailable' } }, 'the client is told');
});

t.test(
  "while the log cannot record (its journal's disk is full), health answers 200, degraded, unlogged; every other call gets 503",
  { skip: smallDiskUnavailable() ?? false },
  async (t) => {
    const disk = await smallDisk(t, 1024 * 1024);
    const journal = { SOVEREIGN_AUDIT_JOURNAL_DIR: `${disk.here}/journal` };
    const { baseURL, secret } = await startStandInApp(t, { speaker: { engine: speaker } }, {}, journal);
    const health = () => fetch(`${baseURL}/health`, { headers: { authorization: `Bearer ${secret}` } });
    const before = await health();
    t.equal(before.status, 200);
    t.match(before.headers.get('x-audit-leaf'), /^\d+$/, 'while the log records, health has its entry like any call');
    await before.text();

    fill(disk.here);
    // The journal's last page may still take a few entries.
    let refused: Response | undefined;
    for (let i = 0; i < 200 && !refused; i++) {
      const res = await call(baseURL, secret, false);
      if (res.status === 503) refused = res;
      else await res.text();
    }
    t.match(await refused?.json(), { error: { code: 'audit_unavailable', message: /data disk is full/ } }, 'a call is refused');

    const during = await health();
    t.equal(during.status, 200, 'health answers');
    t.equal(during.headers.get('x-audit-leaf'), null, 'without an entry: the log takes none');
    t.match(await during.json(), { status: 'degraded', audit: { problem: /stopped after a failed write: ENOSPC/ } }, 'and says why');
    const after = await call(baseURL, secret, false);
    t.equal(after.status, 503, 'every other call still gets 503');
    t.match(await after.json(), { error: { code: 'audit_unavailable' } });
  },
);

/** Reads a streamed response, noting when each piece arrived. */
async function piecesOf(res: Response): Promise<Array<{ at: number; text: string }>> {
  const pieces: Array<{ at: number; text: string }> = [];
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  for (let r = await reader.read(); !r.done; r = await reader.read()) pieces.push({ at: performance.now(), text: decoder.decode(r.value) });
  return pieces;
}

t.test("a stream's last events wait for its entry and leave with [DONE]; its text does not", async (t) => {
  // Tools: an engine that never says it started and never streams text, only returns a tool call.
  const caller: ScriptedEngine = {
    async close() {},
    async chat() {
      const usage = { promptTokens: 1, completionTokens: 1 };
      return { content: '', toolCalls: [{ id: 'call_1', name: 'look', arguments: '{}' }], finishReason: 'tool_calls', usage };
    },
  };
  const failing: ScriptedEngine = {
    async close() {},
    async chat(_model, _req, { onText }) {
      onText(ANSWER);
      throw new Error('the engine broke');
    },
  };
  const { baseURL, secret, audit } = await startStandInApp(t, {
    speaker: { engine: speaker },
    caller: { engine: caller },
    failing: { engine: failing },
  });
  // Every entry takes 800 ms to be written; when it was is noted.
  const log = audit.log;
  const append = log.appendCanonical.bind(log);
  let writtenAt = Infinity;
  log.appendCanonical = (json: string) =>
    new Promise((resolve) => setTimeout(resolve, 800))
      .then(() => append(json))
      .then((leaf) => {
        writtenAt = performance.now();
        return leaf;
      });
  const stream = async (model: string) => {
    writtenAt = Infinity;
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model,
        messages: [{ role: 'user', content: 'hello' }],
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    t.equal(res.status, 200);
    const pieces = await piecesOf(res);
    const arrival = (pattern: RegExp) => pieces.find((p) => pattern.test(p.text))?.at ?? NaN;
    return { arrival, text: pieces.map((p) => p.text).join('') };
  };

  const spoken = await stream('speaker');
  // (Scrubbing holds the last word back: letters that might begin an IBAN. It leaves with the last events.)
  t.ok(spoken.arrival(/the answer that must not/) < writtenAt, 'the text went out before the entry was written');
  for (const last of [/"finish_reason":"stop"/, /"usage":\{/, /x-audit-leaf/, /\[DONE\]/])
    t.ok(spoken.arrival(last) >= writtenAt, `${String(last)} waited for the entry`);

  const called = await stream('caller');
  for (const last of [/"role":"assistant"/, /"tool_calls":\[/, /"finish_reason":"tool_calls"/, /\[DONE\]/])
    t.ok(called.arrival(last) >= writtenAt, `${String(last)} waited for the entry (an engine that never said it started)`);

  const failed = await stream('failing');
  t.ok(failed.arrival(/the answer that must not/) < writtenAt, 'the text before the failure went out at once');
  t.ok(failed.arrival(/"error":\{/) >= writtenAt, 'the error event waited for the entry');
  t.match(failed.text, /"error":\{[^]*data: \[DONE\]/, 'and came before [DONE]');
});
