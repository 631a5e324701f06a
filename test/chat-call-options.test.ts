// The options the chat route hands an engine, buffered and streamed: the call's AbortSignal as a plain property, no
// getter of their own (on Node 20, V8 keeps what an object literal's own getter reaches alive through young
// collections: bench/gateway/NOTES.md). That a client who leaves cancels the upstream call through the signal is
// tested end to end in test/upstream.test.ts.
import t from 'tap';
import type { ChatCallOptions } from '../daemon/engines/index.js';
import { startStandInApp, type ScriptedEngine } from './helpers/app.js';

t.test('the chat route hands engines plain options with an AbortSignal, buffered and streamed', async (t) => {
  const seen: ChatCallOptions[] = [];
  const recorder: ScriptedEngine = {
    async close() {},
    async chat(_model, _req, options) {
      seen.push(options);
      const usage = { promptTokens: 1, completionTokens: 1 };
      options.onUsage?.(usage);
      return { content: 'ok', toolCalls: [], finishReason: 'stop', usage };
    },
  };
  const { baseURL, secret } = await startStandInApp(t, { recorder: { engine: recorder } });
  for (const stream of [false, true]) {
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'recorder', messages: [{ role: 'user', content: 'hello' }], stream }),
    });
    t.equal(res.status, 200);
    await res.text();
  }
  t.equal(seen.length, 2);
  for (const options of seen) {
    const own = Object.getOwnPropertyDescriptor(options, 'signal');
    t.ok(own && 'value' in own, 'signal is a plain property, not a getter');
    t.ok(options.signal instanceof AbortSignal, 'signal is an AbortSignal');
    t.equal(options.signal.aborted, false, 'not aborted by a call that completed');
  }
  t.equal(seen[1]?.stream, true);
});
