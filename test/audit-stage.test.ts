// The audit stage when the log cannot record (SPEC "Audit"): no response goes out unlogged. A buffered call is
// answered 503 audit_unavailable instead of its result; a streamed one, whose content has already gone out, ends
// with an error event saying so. The log is made to refuse by closing it under the running app.
import t from 'tap';
import type { ChatEngine } from '../daemon/engines/index.js';
import { startStandInApp } from './helpers/app.js';

const ANSWER = 'the answer that must not leave unlogged';
const speaker: ChatEngine = {
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
  const { baseURL, secret, audit } = await startStandInApp(t, { speaker: { engine: speaker } }, {}, {}, true);
  const ok = await call(baseURL, secret, false);
  t.equal(ok.status, 200, 'recorded while the log works');
  t.match(ok.headers.get('x-audit-leaf'), /^\d+$/);
  t.match(await ok.text(), ANSWER);

  await audit!.log.close();
  const refused = await call(baseURL, secret, false);
  t.equal(refused.status, 503);
  t.equal(refused.headers.get('retry-after'), '5');
  t.equal(refused.headers.get('x-audit-leaf'), null, 'no leaf to name');
  t.match(refused.headers.get('x-request-id'), /^req_/);
  const body = await refused.text();
  t.notMatch(body, ANSWER, 'the result is withheld');
  t.match(JSON.parse(body), { error: { code: 'audit_unavailable', type: String, message: /audit log could not record/ } });
});

t.test('a streamed call the log cannot record ends with an audit_unavailable event before [DONE]', async (t) => {
  const { baseURL, secret, audit } = await startStandInApp(t, { speaker: { engine: speaker } }, {}, {}, true);
  await audit!.log.close();
  const res = await call(baseURL, secret, true);
  t.equal(res.status, 200, 'the stream had started before the entry was due');
  const text = await res.text();
  t.notMatch(text, /x-audit-leaf/, 'no leaf is named');
  const events = text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice('data: '.length));
  t.equal(events.at(-1), '[DONE]');
  t.match(JSON.parse(events.at(-2)!), { error: { code: 'audit_unavailable' } }, 'the client is told');
});
