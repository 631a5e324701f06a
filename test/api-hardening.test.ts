// Abuse that costs nothing to send must cost the daemon nothing lasting: pipelined floods, bodies nobody accepted,
// odd Expect headers, CONNECT, requests without Host. Raw sockets, since no client library sends these.
import { writeFileSync } from 'node:fs';
import net from 'node:net';
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
