// StopSignal, the cheap stop every chat call carries (daemon/engines/stop.ts): it fires once, its AbortSignal (made
// on demand, before or after the stop) carries the same reason, and a listener that throws is reported the way an
// AbortSignal reports one, without cutting short the code that stopped it. That a client who leaves cancels the
// upstream call through it is tested end to end in test/upstream.test.ts. The options a chat route hands an engine
// make their AbortSignal from the stop, and carry no getter of their own (StopCallOptions says why).
import t from 'tap';
import { abortSignalOf, StopCallOptions, StopSignal, type ChatCallOptions, type ChatEngine } from '../daemon/engines/index.js';
import { startStandInApp } from './helpers/app.js';

t.test('fires once, with the first reason', async (t) => {
  const stop = new StopSignal();
  let fired = 0;
  stop.on('abort', () => fired++);
  t.equal(stop.aborted, false);
  const reason = new Error('client disconnected');
  stop.abort(reason);
  stop.abort(new Error('later'));
  t.equal(fired, 1);
  t.equal(stop.aborted, true);
  t.equal(stop.reason, reason);
});

t.test('its AbortSignal aborts with it, whether made before or after', async (t) => {
  const early = new StopSignal();
  const signal = early.signal;
  t.equal(signal.aborted, false);
  t.equal(early.signal, signal, 'one AbortSignal per stop');
  const reason = new Error('gone');
  early.abort(reason);
  t.equal(signal.aborted, true);
  t.equal(signal.reason, reason);

  const late = new StopSignal();
  late.abort(reason);
  t.equal(late.signal.aborted, true, 'made after the stop: already aborted');
  t.equal(late.signal.reason, reason);

  const plain = new AbortController().signal;
  t.equal(abortSignalOf(plain), plain, 'an AbortSignal is its own');
  t.equal(abortSignalOf(early), signal);
});

t.test('a listener that throws is reported as uncaught, and abort() returns to its caller', async (t) => {
  const stop = new StopSignal();
  stop.on('abort', () => {
    throw new Error('listener bug');
  });
  const reported = new Promise<Error>((resolve) => process.once('uncaughtException', resolve));
  let after = false;
  stop.abort(new Error('gone'));
  after = true;
  t.equal(after, true, 'the caller carried on');
  t.equal(stop.aborted, true);
  t.match((await reported).message, 'listener bug');
});

t.test("chat options make the call's AbortSignal from its stop, when read, through the prototype", async (t) => {
  const stop = new StopSignal();
  const options = new StopCallOptions({ onText: () => {}, stop });
  t.equal(Object.getOwnPropertyDescriptor(options, 'signal'), undefined, 'no getter of its own');
  t.equal(options.stop, stop);
  const signal = options.signal;
  t.equal(signal, stop.signal, "the stop's own AbortSignal");
  const reason = new Error('gone');
  stop.abort(reason);
  t.equal(signal.aborted, true);
  t.equal(signal.reason, reason);
});

t.test('the chat route hands engines such options, buffered and streamed', async (t) => {
  const seen: ChatCallOptions[] = [];
  const recorder: ChatEngine = {
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
    t.equal(Object.getOwnPropertyDescriptor(options, 'signal'), undefined, 'signal is not an own getter');
    t.ok(options.stop instanceof StopSignal);
    t.equal(options.signal, options.stop!.signal, 'signal is made from stop');
  }
  t.equal(seen[1]?.stream, true);
});
