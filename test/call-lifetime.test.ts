// A call's end (daemon/http/lifetime.ts): the callbacks run once, when the response has closed or the connection is
// gone, and a keep-alive connection keeps nothing of a call that has ended. (A call the client abandons cancels its
// upstream call: test/upstream.test.ts.)
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import Fastify from 'fastify';
import t from 'tap';
import { Pool } from 'undici';
import { onCallEnd } from '../daemon/http/lifetime.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Collects until `ref` is gone or the tries run out; a WeakRef read in this turn stays alive until the next. */
async function collected(ref: WeakRef<object>): Promise<boolean> {
  for (let i = 0; i < 10 && ref.deref() !== undefined; i++) {
    await new Promise((resolve) => setImmediate(resolve));
    gc();
  }
  return ref.deref() === undefined;
}

t.test('a keep-alive connection keeps nothing of a call that has ended', async (t) => {
  const app = Fastify();
  const requests: Array<WeakRef<object>> = [];
  const ends: boolean[] = [];
  app.post('/call', async (request, reply) => {
    requests.push(new WeakRef(request.raw));
    onCallEnd(request, reply, (finished) => ends.push(finished));
    onCallEnd(request, reply, (finished) => ends.push(finished));
    return { ok: true, echoed: (request.body as { text: string }).text };
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const address = app.server.address() as { port: number };
  const pool = new Pool(`http://127.0.0.1:${address.port}`, { connections: 1 });
  t.teardown(() => pool.close());
  for (let i = 0; i < 3; i++) {
    const res = await pool.request({
      method: 'POST',
      path: '/call',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: `call ${i}` }),
    });
    t.same(await res.body.json(), { ok: true, echoed: `call ${i}` });
  }
  await new Promise((resolve) => setImmediate(resolve));
  t.same(ends, [true, true, true, true, true, true], 'each callback ran once, with the response complete');
  // The connection is still open: its first and last calls must both be free to go.
  for (const [i, ref] of requests.entries()) t.ok(await collected(ref), `call ${i}'s request is collected while the connection stays open`);
});

t.test('a connection that goes away ends the calls still on it, unfinished', async (t) => {
  const app = Fastify();
  const ended = new Promise<boolean>((resolve) => {
    app.post('/slow', (request, reply) => {
      onCallEnd(request, reply, resolve);
      // Never answers: the client gives up.
    });
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const address = app.server.address() as { port: number };
  const pool = new Pool(`http://127.0.0.1:${address.port}`, { connections: 1 });
  const controller = new AbortController();
  const call = pool.request({
    method: 'POST',
    path: '/slow',
    body: '{}',
    headers: { 'content-type': 'application/json' },
    signal: controller.signal,
  });
  await new Promise((resolve) => setTimeout(resolve, 50));
  controller.abort();
  await t.rejects(call);
  t.equal(await ended, false, 'the call ended, its response not complete');
  await pool.close();
});
