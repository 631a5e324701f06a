// Abuse that costs nothing to send must cost the daemon nothing lasting: pipelined floods, bodies nobody accepted,
// odd Expect headers, CONNECT, requests without Host. Raw sockets, since no client library sends these.
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { ID_HEADERS, parseRawHeaders, rawExchange, request } from './helpers/http.js';

const dataDir = tempDir(t);
const { secret } = createKey(dataDir);
const config = `${dataDir}/config.json`;
writeFileSync(config, JSON.stringify({ limits: { maxInFlight: 4 } }));
const daemon = await startDaemon(t, ['--config', config, '--data-dir', dataDir]);
const port = Number(new URL(daemon.origin).port);
const ok = async () => (await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } })).status;

t.test('pipelined calls abandoned by a reset connection give their in-flight places back', async (t) => {
  for (let round = 0; round < 3; round++) {
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    socket.on('error', () => {});
    // Keep pipelining without reading for a second: the unread answers fill the socket buffers, so later answers
    // queue without a socket of their own. Then reset the connection under them.
    const batch = Buffer.from('GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(1700));
    const until = Date.now() + 1000;
    while (Date.now() < until) await new Promise((r) => (socket.write(batch) ? setImmediate(r) : setTimeout(r, 5)));
    socket.resetAndDestroy();
    await new Promise((r) => setTimeout(r, 100));
  }
  await new Promise((r) => setTimeout(r, 200));
  t.equal(await ok(), 200, 'with a ceiling of 4, a single leaked place per round would already show');
});

t.test('a body nobody accepted is not read: the early answer closes the connection', async (t) => {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  let reply = '';
  socket.on('data', (d: Buffer) => (reply += d.toString('latin1')));
  const closed = new Promise<boolean>((r) => socket.once('close', () => r(true)));
  socket.on('error', () => {});
  socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n');
  const chunk = Buffer.alloc(64 * 1024, 0x20);
  let sent = 0;
  const pump = setInterval(() => {
    if (!socket.destroyed && socket.writable) {
      socket.write(chunk);
      sent += chunk.length;
    }
  }, 1);
  const result = await Promise.race([closed, new Promise<boolean>((r) => setTimeout(() => r(false), 5000))]);
  clearInterval(pump);
  socket.destroy();
  const parsed = parseRawHeaders(reply);
  t.equal(parsed.status, 401);
  t.equal(parsed.headers.connection, 'close');
  t.ok(result, 'the server closed the connection');
  t.ok(sent < 64 * 1024 * 1024, `the client could not stream an endless body (${sent} bytes sent)`);
});

/** A half-closable connection to the daemon that keeps what it reads and the error its writes meet. */
async function rawConnection() {
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  await new Promise((r) => socket.once('connect', r));
  const seen: { reply: string; error?: NodeJS.ErrnoException } = { reply: '' };
  socket.on('data', (d: Buffer) => (seen.reply += d.toString('latin1')));
  socket.on('error', (e) => (seen.error = e));
  return { socket, seen };
}

/** Resolves when the socket can take more, or its writes failed. */
function writable(socket: net.Socket) {
  return new Promise<void>((resolve) => {
    const done = () => {
      socket.off('drain', done);
      socket.off('error', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('error', done);
  });
}

/**
 * Waits `ms`, then writes a byte twice. A connection the daemon has closed answers the first with a reset, which the
 * second meets: the error's code, or undefined while the daemon still reads.
 */
async function writeAfter(socket: net.Socket, seen: { error?: NodeJS.ErrnoException }, ms: number) {
  await sleep(ms);
  for (let i = 0; i < 2 && !seen.error; i++) {
    socket.write('x');
    await sleep(200);
  }
  return seen.error?.code;
}

/**
 * Sends a request head, waits for the daemon's early answer, then sends `bodyBytes` of body (in chunks when `chunked`)
 * and does not end the connection. A second later it writes a few bytes more: a reset answers them only if the daemon
 * closed the connection once the body was in.
 */
async function refusedBody(head: string, bodyBytes: number, chunked = false) {
  const { socket, seen } = await rawConnection();
  try {
    const opened = Date.now();
    const framing = chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${bodyBytes}`;
    socket.write(`${head}Content-Type: application/json\r\n${framing}\r\n\r\n`);
    // The answer arrives before any of the body is sent: the daemon has refused it by then.
    while (!seen.reply.includes('\r\n\r\n') && Date.now() - opened < 5000) await sleep(10);
    const chunk = Buffer.alloc(256 * 1024, 0x20);
    const frame = (piece: Buffer) =>
      chunked ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]) : piece;
    let sent = 0;
    while (sent < bodyBytes && !seen.error) {
      const piece = chunk.subarray(0, Math.min(chunk.length, bodyBytes - sent));
      if (!socket.write(frame(piece))) await writable(socket);
      sent += piece.length;
    }
    if (chunked && !seen.error) socket.write('0\r\n\r\n');
    const whileSending = { error: seen.error?.code, ms: Date.now() - opened, sent };
    const afterBody = await writeAfter(socket, seen, 1000);
    return { reply: parseRawHeaders(seen.reply), whileSending, afterBody };
  } finally {
    socket.destroy();
  }
}

t.test('a refused body is read to its end before the connection closes, so the client reads the answer', async (t) => {
  // Closing at once would meet the body's bytes with a reset, which throws away the unread answer (EPIPE or
  // ECONNRESET on the client's write).
  const withKey = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n`;
  const noKey = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n';
  const cases: Array<[string, string, number, boolean, number, string]> = [
    ['over the body limit', withKey, 8 << 20, false, 413, 'payload_too_large'],
    ['no key', noKey, 2 << 20, false, 401, 'invalid_api_key'],
    ['no key, chunked', noKey, 2 << 20, true, 401, 'invalid_api_key'],
  ];
  for (const [name, head, bytes, chunked, status, code] of cases) {
    const { reply, whileSending, afterBody } = await refusedBody(head, bytes, chunked);
    t.equal(whileSending.error, undefined, `${name}: the whole body was taken, with no reset`);
    t.equal(whileSending.sent, bytes, `${name}: every byte sent`);
    t.equal(reply.status, status, name);
    t.equal(reply.headers.connection, 'close', `${name}: the connection closes after the body`);
    t.equal(JSON.parse(reply.body).error.code, code, `${name}: the answer is whole`);
    t.match(afterBody, /^(ECONNRESET|EPIPE)$/, `${name}: closed once the body was in, not seconds later`);
  }
});

t.test('a refused body without a declared length is cut once 64 MiB have come in', async (t) => {
  const noKey = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n';
  const { reply, whileSending } = await refusedBody(noKey, 512 << 20, true);
  t.equal(reply.status, 401);
  t.match(whileSending.error, /^(ECONNRESET|EPIPE)$/, 'the connection was cut while the body came in');
  t.ok(whileSending.sent < 512 << 20, `cut before the end (${whileSending.sent >> 20} MiB sent)`);
  t.ok(whileSending.sent >= 64 << 20, 'not before 64 MiB');
  t.ok(whileSending.ms < 4000, `by its size, not by the time it took (${whileSending.ms} ms)`);
});

t.test('a refused body that stops arriving is waited for a few seconds, not until the request timeout', async (t) => {
  // Once the daemon has closed its side entirely, the next bytes the client sends are answered with a reset.
  const { socket, seen } = await rawConnection();
  t.teardown(() => socket.destroy());
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\n`;
  socket.write(`${head}Content-Type: application/json\r\nContent-Length: ${8 << 20}\r\n\r\n`);
  socket.write(Buffer.alloc(1 << 20, 0x20));
  t.equal(await writeAfter(socket, seen, 1000), undefined, 'a second after the answer, the daemon still takes the body');
  t.equal(parseRawHeaders(seen.reply).status, 413);
  t.match(await writeAfter(socket, seen, 5000), /^(ECONNRESET|EPIPE)$/, 'six seconds after it, the connection is gone');
});

t.test('Expect: 100-continue invites the body only from a caller with a valid key', async (t) => {
  const head = (auth: string) =>
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\nExpect: 100-continue\r\n${auth}\r\n`;
  const without = await rawExchange(daemon.origin, head(''), 1500);
  t.notMatch(without, /100 Continue/);
  t.match(without, /^HTTP\/1\.1 401/);
  const withKey = await rawExchange(daemon.origin, head(`Authorization: Bearer ${secret}\r\n`), 800);
  t.match(withKey, /^HTTP\/1\.1 100 Continue/);
});

t.test('requests Node would answer itself get our headers and error shape', async (t) => {
  const cases: Array<[string, string, number]> = [
    ['no Host header', 'GET /v1/models HTTP/1.1\r\n\r\n', 401],
    ['unknown Expect', `GET /v1/models HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n`, 417],
    ['CONNECT', 'CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n', 405],
  ];
  for (const [name, bytes, status] of cases) {
    const reply = parseRawHeaders(await rawExchange(daemon.origin, bytes, 1500));
    t.equal(reply.status, status, name);
    for (const h of ID_HEADERS) t.ok(reply.headers[h], `${name}: ${h}`);
    t.equal(JSON.parse(reply.body).error.type, 'invalid_request_error', `${name}: OpenAI shape`);
  }
});

t.test('still serving after all of that', async (t) => {
  t.equal(await ok(), 200);
  t.equal(daemon.proc.exitCode, null);
});
