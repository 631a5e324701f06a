// A client that stops reading its answer cannot hold its in-flight place, nor the answer's memory, for as long as it
// keeps the connection open: once an answer waits on a client that has read nothing for timeouts.readerIdleMs, the
// connection is closed and the place comes back. A client that reads slowly, with pauses shorter than that, gets its
// whole answer. The answer is a large embeddings list from a stand-in upstream (2,048 vectors of many dimensions, as
// a real embeddings model gives); raw sockets to loopback for the clients that stop reading.
import http from 'node:http';
import net from 'node:net';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';
import { request } from './helpers/http.js';

const READER_IDLE_MS = 5000;
const DIMENSIONS = 512;

// The stand-in upstream: every input gets one vector of DIMENSIONS numbers, so 2,048 inputs make an answer of about
// 20 MB, far more than a connection's socket buffers hold.
const vector = Array.from({ length: DIMENSIONS }, (_, i) => Math.sin(i + 1) / 3);
const upstream = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    if (req.method === 'GET') {
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'e' }] }));
      return;
    }
    const input = JSON.parse(Buffer.concat(chunks).toString('utf8')).input as string[];
    const data = input.map((_, index) => ({ object: 'embedding', index, embedding: vector }));
    res.end(JSON.stringify({ object: 'list', data, usage: { prompt_tokens: input.length, total_tokens: input.length } }));
  });
});
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
t.teardown(() => upstream.close());

const dir = tempDir(t);
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(
  config,
  JSON.stringify({
    dataDir,
    // A ceiling of 16: a key holds at most 4 places (limits.keyShare 0.25).
    limits: { maxInFlight: 16 },
    timeouts: { readerIdleMs: READER_IDLE_MS },
    upstreams: [
      {
        name: 'rack',
        baseUrl: `http://127.0.0.1:${(upstream.address() as { port: number }).port}/v1`,
        models: [{ id: 'big-embed', upstreamModel: 'e', capability: 'embeddings' }],
      },
    ],
  }),
);
const key = createKey(dataDir, 'readers', ['--config', config]);
const daemon = await startDaemon(t, ['--config', config]);
await waitForModels(daemon.baseURL, key.secret, ['big-embed']);
const port = Number(new URL(daemon.origin).port);
const body = JSON.stringify({ model: 'big-embed', input: Array.from({ length: 2048 }, (_, i) => `passage ${i}`) });

interface Reader {
  socket: net.Socket;
  /** Bytes of the answer read so far. */
  read: number;
  /** When the daemon closed the connection, in ms after the answer began; null while it is open. */
  closedAfter: number | null;
  answeredAt: number | null;
  /** Whether it stops reading at each piece that arrives. */
  stops: boolean;
  /** The answer's first bytes (its head among them). */
  head: string;
}

/** Sends the embeddings call, and reads the answer's first bytes only: then it stops reading (until `resume`). */
async function stalledReader(): Promise<Reader> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const reader: Reader = { socket, read: 0, closedAfter: null, answeredAt: null, stops: true, head: '' };
  socket.on('data', (d: Buffer) => {
    reader.read += d.length;
    if (reader.head.length < 4096) reader.head += d.toString('latin1', 0, 4096);
    reader.answeredAt ??= Date.now();
    if (reader.stops) socket.pause();
  });
  socket.on('close', () => (reader.closedAfter = reader.answeredAt === null ? -1 : Date.now() - reader.answeredAt));
  socket.on('error', () => {});
  socket.write(
    `POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key.secret}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  return reader;
}

const embed = () =>
  request(`${daemon.baseURL}/embeddings`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'big-embed', input: 'hello' }),
  });

/** The length of the whole answer, its head included, from the head's Content-Length. */
const answerLength = (head: string) => head.indexOf('\r\n\r\n') + 4 + Number(/content-length: (\d+)/i.exec(head)?.[1]);

t.test('a client that stops reading its answer loses the connection, and the key gets its place back', async (t) => {
  const readers: Reader[] = [];
  t.teardown(() => readers.forEach((r) => r.socket.destroy()));
  for (let i = 0; i < 4; i++) readers.push(await stalledReader());
  for (const until = Date.now() + 30_000; Date.now() < until && readers.some((r) => !r.head.includes('\r\n\r\n'));) await sleep(50);
  t.ok(
    readers.every((r) => r.head.startsWith('HTTP/1.1 200')),
    'every answer began',
  );
  const firstAnswer = Math.min(...readers.map((r) => r.answeredAt!));
  t.equal((await embed()).status, 429, 'while the four unread answers wait, they hold the key’s whole share');

  // The daemon cuts them once they have waited readerIdleMs on their clients (on the daemon before: never).
  let status = 429;
  for (const until = Date.now() + 20_000; Date.now() < until && status === 429;) {
    await sleep(250);
    status = (await embed()).status;
  }
  const after = Date.now() - firstAnswer;
  t.equal(status, 200, `the places came back within 20 s: the key is served again (after ${after} ms)`);
  t.ok(after >= READER_IDLE_MS - 250, 'not before the answers had waited readerIdleMs');

  // Once the daemon has logged each cut, reading again, each client finds its connection reset before its answer ends.
  const cuts = () => daemon.logs.filter((line) => line.includes('a client stopped reading its answer')).length;
  for (const until = Date.now() + 20_000; Date.now() < until && cuts() < 4;) await sleep(50);
  t.equal(cuts(), 4, 'each cut is logged');
  for (const reader of readers) {
    reader.stops = false;
    reader.socket.resume();
  }
  for (const until = Date.now() + 10_000; Date.now() < until && readers.some((r) => r.closedAfter === null);) await sleep(50);
  for (const reader of readers) {
    t.not(reader.closedAfter, null, 'the connection is closed');
    t.ok(reader.read < answerLength(reader.head), `the answer was cut (${reader.read} of ${answerLength(reader.head)} bytes)`);
  }
});

t.test('a client that reads slowly, pausing for less than readerIdleMs, gets its whole answer', async (t) => {
  const reader = await stalledReader();
  t.teardown(() => reader.socket.destroy());
  for (const until = Date.now() + 30_000; Date.now() < until && !reader.head.includes('\r\n\r\n');) await sleep(50);
  const whole = answerLength(reader.head);
  t.ok(whole > 10_000_000, `an answer of ${whole} bytes`);
  // Bursts of reading with pauses of half the idle time in between, until the whole answer has come.
  reader.stops = false;
  for (let bursts = 0; bursts < 200 && reader.read < whole && reader.closedAfter === null; bursts++) {
    reader.socket.pause();
    await sleep(READER_IDLE_MS / 2);
    reader.socket.resume();
    await sleep(50);
  }
  t.equal(reader.read, whole, 'the whole answer was read');
  t.equal(reader.closedAfter, null, 'and the connection is still open');
});
