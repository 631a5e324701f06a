// How an upstream's answer is read (daemon/engines/upstream/response.ts): through undici's dispatch, each piece of the
// body handed straight to its one reader. Against a real HTTP server on loopback: whole bodies, a reader that comes
// after a megabyte has arrived, aborts before and during the answer, a reader that throws, bodies thrown away with
// the connection kept, and the headers' shape.
import { getEventListeners } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { Pool } from 'undici';
import { dispatch } from '../daemon/engines/upstream/response.js';

const closed: string[] = [];
const server = http.createServer((req, res) => {
  req.on('close', () => closed.push(req.url ?? ''));
  if (req.url === '/small') {
    res.setHeader('x-twice', ['one', 'two']);
    res.setHeader('__proto__', 'not a prototype');
    res.setHeader('Content-Type', 'application/json');
    res.end('{"ok":true}');
  } else if (req.url === '/big') {
    // 3 MB in 64 KB pieces, each byte its offset mod 251, so a lost, doubled or reordered piece shows.
    let sent = 0;
    const piece = () => {
      while (sent < 3 * 1024 * 1024) {
        const chunk = Buffer.alloc(64 * 1024);
        for (let i = 0; i < chunk.length; i++) chunk[i] = (sent + i) % 251;
        sent += chunk.length;
        if (!res.write(chunk)) return void res.once('drain', piece);
      }
      res.end();
    };
    piece();
  } else if (req.url === '/slow-headers') {
    setTimeout(() => res.end('late'), 2000);
  } else if (req.url === '/endless-refusal') {
    // A refusal whose body never ends: thrown away, it must not hold the call.
    res.writeHead(503, { 'retry-after': '1' });
    const more = () => {
      while (res.write(Buffer.alloc(16 * 1024, 120)));
      res.once('drain', more);
    };
    more();
  } else if (req.url === '/half') {
    res.write('first part ');
    // The rest never comes: the reader must be told when the call is aborted.
  } else {
    res.statusCode = 404;
    res.end('no');
  }
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const pool = new Pool(origin, { connections: 1 });
t.teardown(async () => {
  await pool.close();
  server.closeAllConnections();
  server.close();
});

const get = (path: string, signal?: AbortSignal) => dispatch(pool, { method: 'GET', path }, signal);
const text = async (path: string) => {
  const response = await get(path);
  const pieces: Buffer[] = [];
  await response.each((p) => pieces.push(p));
  return { response, body: Buffer.concat(pieces).toString() };
};

t.test('a whole answer, its status and its headers (found whatever their case; the first of repeated ones)', async (t) => {
  const { response, body } = await text('/small');
  t.equal(response.statusCode, 200);
  t.equal(body, '{"ok":true}');
  t.equal(response.header('content-type'), 'application/json', 'sent as Content-Type');
  t.equal(response.header('content-length'), '11');
  t.equal(response.header('x-twice'), 'one');
  t.equal(response.header('__proto__'), 'not a prototype');
  t.equal(response.header('content-typf'), undefined, 'a name of the same length that differs');
  t.equal(response.header('retry-after'), undefined, 'an absent one');
  const missing = await text('/nothing');
  t.equal(missing.response.statusCode, 404);
  t.equal(missing.body, 'no');
});

t.test('a reader that comes after a megabyte has arrived gets every byte, in order', async (t) => {
  const response = await get('/big');
  await new Promise((r) => setTimeout(r, 300));
  let at = 0;
  let wrong = -1;
  await response.each((piece) => {
    for (let i = 0; i < piece.length; i++, at++) if (piece[i] !== at % 251 && wrong < 0) wrong = at;
  });
  t.equal(at, 3 * 1024 * 1024, 'all 3 MB');
  t.equal(wrong, -1, 'each byte where it was sent');
});

t.test('an abort before the answer rejects with the signal’s reason and closes the connection', async (t) => {
  const stop = new AbortController();
  const reason = new Error('the client went away');
  setTimeout(() => stop.abort(reason), 100);
  const started = Date.now();
  const err = await get('/slow-headers', stop.signal).catch((e: unknown) => e);
  t.equal(err, reason);
  t.ok(Date.now() - started < 1000, 'at once, not when the server answers');
  await new Promise((r) => setTimeout(r, 100));
  t.ok(closed.includes('/slow-headers'), 'the server saw the connection close');
  const timeout = await get('/slow-headers', AbortSignal.timeout(50)).catch((e: unknown) => e);
  t.equal((timeout as Error).name, 'TimeoutError', 'an AbortSignal’s reason too');
  const already = new AbortController();
  already.abort(reason);
  t.equal(await get('/small', already.signal).catch((e: unknown) => e), reason, 'an abort that came first sends nothing');
});

t.test('an abort during the answer rejects its reader', async (t) => {
  const stop = new AbortController();
  const response = await get('/half', stop.signal);
  const seen: string[] = [];
  const reading = response.each((p) => seen.push(p.toString()));
  setTimeout(() => stop.abort(new Error('stopped')), 100);
  const err = await reading.catch((e: unknown) => e);
  t.match(err, { message: 'stopped' });
  t.same(seen, ['first part '], 'what came before the abort was handed on');
});

t.test('a reader that throws stops the reading: the call is aborted and the throw rejects', async (t) => {
  const response = await get('/big');
  let pieces = 0;
  const err = await response
    .each(() => {
      if (++pieces === 2) throw new Error('too much');
    })
    .catch((e: unknown) => e);
  t.match(err, { message: 'too much' });
  t.equal(pieces, 2, 'no piece after the throw');
  t.equal((await text('/small')).body, '{"ok":true}', 'the pool still answers');
});

t.test('a body thrown away leaves the connection usable; a body is read once', async (t) => {
  const response = await get('/small');
  await response.dump();
  const again = await response.each(() => {}).catch((e: unknown) => e);
  t.match(again, { message: /already read/ });
  let connections = 0;
  pool.on('connect', () => connections++);
  for (let i = 0; i < 3; i++) await (await get('/small')).dump();
  t.equal(connections, 0, 'the same connection each time');
});

t.test('an abort while held pieces are handed over ends the reading at once', async (t) => {
  const stop = new AbortController();
  const response = await get('/big', stop.signal);
  await new Promise((r) => setTimeout(r, 300));
  let seen = 0;
  const err = await response
    .each(() => {
      if (++seen === 1) stop.abort(new Error('enough'));
    })
    .catch((e: unknown) => e);
  t.match(err, { message: 'enough' });
  t.equal(seen, 1, 'no held piece after the abort');
});

t.test('a body thrown away is read to 128 KB at most, then its connection is closed', async (t) => {
  const response = await get('/endless-refusal');
  t.equal(response.statusCode, 503);
  t.equal(response.header('retry-after'), '1');
  const started = Date.now();
  const err = await response.dump().catch((e: unknown) => e);
  t.match(err, { message: /thrown away after 131072 bytes/ });
  t.ok(Date.now() - started < 2000, 'at once');
  t.equal((await text('/small')).body, '{"ok":true}', 'the pool answers on a new connection');
});

t.test('no abort listener is left on a signal once its call is over, however it ended', async (t) => {
  const count = (signal: AbortSignal) => getEventListeners(signal, 'abort').length;
  const done = new AbortController();
  await (await get('/small', done.signal)).dump();
  t.equal(count(done.signal), 0, 'read to its end');
  const refused = new AbortController();
  const waiting = get('/slow-headers', refused.signal).catch(() => {});
  t.equal(count(refused.signal), 1, 'while its call waits');
  refused.abort(new Error('gone'));
  await waiting;
  t.equal(count(refused.signal), 0, 'aborted before its answer');
  const cut = new AbortController();
  const reading = (await get('/half', cut.signal)).each(() => {});
  cut.abort(new Error('cut'));
  await reading.catch(() => {});
  t.equal(count(cut.signal), 0, 'aborted during its answer');
});
