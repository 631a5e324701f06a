// StopSignal, the cheap stop every chat call carries (daemon/engines/stop.ts): it fires once, its AbortSignal (made
// on demand, before or after the stop) carries the same reason, and a listener that throws is reported the way an
// AbortSignal reports one, without cutting short the code that stopped it. That a client who leaves cancels the
// upstream call through it is tested end to end in test/upstream.test.ts.
import t from 'tap';
import { abortSignalOf, StopSignal } from '../daemon/engines/index.js';

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
