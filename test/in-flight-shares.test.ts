// No key and no project may hold more than its share of the in-flight places, and a body that stops arriving is cut
// off: a key that opens more slow-body calls than its share gets 429 for the extra ones while other keys are still
// served, the stalled bodies get 408 after timeouts.bodyIdleMs (not after timeouts.requestMs), and their places come
// back. Bodies that arrive slowly but steadily, uploads included, are not cut. Raw sockets to loopback for the
// slow clients, the openai client for the well-behaved ones.
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import t from 'tap';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { ID_HEADERS, parseRawHeaders, request } from './helpers/http.js';

const BODY_IDLE_MS = 3000;
const dataDir = tempDir(t);
// A ceiling of 16: with the default shares a key holds at most 4 places (limits.keyShare 0.25) and a project 8
// (limits.projectShare 0.5).
const config = `${dataDir}/config.json`;
writeFileSync(config, JSON.stringify({ limits: { maxInFlight: 16 }, timeouts: { bodyIdleMs: BODY_IDLE_MS } }));
const flooder = createKey(dataDir, 'flood');
const sibling = createKey(dataDir, 'flood');
const cousin = createKey(dataDir, 'flood');
const other = createKey(dataDir, 'other');
const uploader = createKey(dataDir, 'uploads');
const daemon = await startDaemon(t, ['--config', config, '--data-dir', dataDir]);
const port = Number(new URL(daemon.origin).port);
const client = (secret: string) => new OpenAI({ apiKey: secret, baseURL: daemon.baseURL, maxRetries: 0, timeout: 10_000 });

interface SlowCall {
  socket: net.Socket;
  reply: string;
  openedAt: number;
  /** When the daemon closed the connection, in ms after it was opened; null while it is open. */
  closedAfter: number | null;
}

/**
 * Sends a POST's head and the first bytes of its declared body, then nothing more: the call waits for the rest of
 * a body that never comes.
 */
async function slowCall(secret: string | null, path = '/v1/chat/completions', type = 'application/json'): Promise<SlowCall> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  const call: SlowCall = { socket, reply: '', openedAt: Date.now(), closedAfter: null };
  socket.on('data', (d: Buffer) => (call.reply += d.toString('latin1')));
  socket.on('close', () => (call.closedAfter = Date.now() - call.openedAt));
  socket.on('error', () => {});
  const auth = secret ? `Authorization: Bearer ${secret}\r\n` : '';
  socket.write(`POST ${path} HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: ${type}\r\nContent-Length: 100000\r\n\r\n{"mo`);
  return call;
}

/** Waits until `count` of the calls have an answer, or `ms` have passed. */
async function answered(calls: SlowCall[], count: number, ms: number): Promise<void> {
  const done = () => calls.filter((c) => c.reply.includes('\r\n\r\n')).length >= count;
  for (const until = Date.now() + ms; Date.now() < until && !done();) await sleep(20);
}

const statusOf = (call: SlowCall) => (call.reply ? parseRawHeaders(call.reply).status : null);

t.test('a key past its share gets 429 while other keys are served; its stalled bodies are cut off', async (t) => {
  // More than the whole ceiling: without shares these 20 would hold all 16 places and every other key would get 503.
  const flood: SlowCall[] = [];
  for (let i = 0; i < 20; i++) flood.push(await slowCall(flooder.secret));
  // Calls without a valid key trickling their bodies too: they are refused at once and hold nothing.
  const anonymous: SlowCall[] = [];
  for (let i = 0; i < 20; i++) anonymous.push(await slowCall(i % 2 ? null : 'sk-sov-not-a-key'));
  await answered([...flood, ...anonymous], 36, 2000);
  t.teardown(() => [...flood, ...anonymous].forEach((c) => c.socket.destroy()));

  const refused = flood.filter((c) => statusOf(c) === 429);
  const waiting = flood.filter((c) => c.reply === '');
  t.equal(waiting.length, 4, 'the key holds its share of the places (4 of 16)');
  t.equal(refused.length, 16, 'its other calls are refused at once');
  t.same(new Set(anonymous.map(statusOf)), new Set([401]), 'calls without a valid key get 401 at once');

  const models = await client(other.secret)
    .models.list()
    .catch((err: Error) => err);
  t.equal('object' in models ? models.object : String(models), 'list', "another key's call is answered while the flood lasts");
  const sameProject = await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${sibling.secret}` } });
  t.equal(sameProject.status, 200, 'and so is another key of the same project');
  t.same(
    waiting.map((c) => c.closedAfter),
    [null, null, null, null],
    'while the flooding key still holds its places',
  );

  const first = parseRawHeaders(refused[0]?.reply ?? '');
  const error = JSON.parse(first.body || '{}').error;
  t.equal(error?.code, 'rate_limit_exceeded');
  t.equal(error?.type, 'requests');
  t.match(error?.message, new RegExp(`Key ${flooder.id} already has 4 calls in progress.*limits\\.keyShare`));
  t.match(first.headers['retry-after'], /^[1-9]\d*$/, 'with Retry-After in whole seconds');
  for (const h of ID_HEADERS) t.ok(first.headers[h], `${h} on the 429`);

  // The held calls' bodies never come: each is cut off after timeouts.bodyIdleMs, long before timeouts.requestMs (60 s).
  for (const until = Date.now() + 15_000; Date.now() < until && waiting.some((c) => c.closedAfter === null);) await sleep(50);
  for (const call of waiting) {
    t.not(call.closedAfter, null, 'the stalled call was cut off within 15 s, not left to the 60 s request timeout');
    t.ok((call.closedAfter ?? 0) >= BODY_IDLE_MS - 100, `not before the body had been idle for bodyIdleMs (${call.closedAfter} ms)`);
    const reply = parseRawHeaders(call.reply);
    t.equal(reply.status, 408, 'answered 408 before the connection closed');
    t.equal(reply.headers.connection, 'close');
    t.equal(JSON.parse(reply.body).error.code, 'request_timeout');
    t.match(JSON.parse(reply.body).error.message, /timeouts\.bodyIdleMs/);
    for (const h of ID_HEADERS) t.ok(reply.headers[h], `${h} on the 408`);
  }
  t.equal((await client(flooder.secret).models.list()).object, 'list', 'the places came back: the key is admitted again');
});

t.test("the keys of one project together hold at most the project's share", async (t) => {
  const calls: SlowCall[] = [];
  t.teardown(() => calls.forEach((c) => c.socket.destroy()));
  for (const key of [flooder, sibling, cousin]) {
    const mine: SlowCall[] = [];
    for (let i = 0; i < 4; i++) mine.push(await slowCall(key.secret));
    await answered(mine, key === cousin ? 4 : 0, 1000);
    calls.push(...mine);
  }
  const held = calls.filter((c) => c.reply === '');
  const refused = calls.filter((c) => statusOf(c) === 429);
  t.equal(held.length, 8, 'two keys fill the project share (8 of 16)');
  t.equal(refused.length, 4, "the third key's calls are refused although its own share is free");
  t.match(
    parseRawHeaders(refused[0]?.reply ?? '').body,
    /"message":"Project proj_\w+ already has 8 calls in progress.*limits\.projectShare/,
  );
  t.equal((await client(other.secret).models.list()).object, 'list', "another project's key is still served");
});

t.test('a stalled multipart upload is cut off like any body, and the daemon carries on', async (t) => {
  const upload = await slowCall(uploader.secret, '/v1/documents', 'multipart/form-data; boundary=x');
  t.teardown(() => upload.socket.destroy());
  for (const until = Date.now() + 15_000; Date.now() < until && upload.closedAfter === null;) await sleep(50);
  t.equal(statusOf(upload), 408);
  t.equal((await client(uploader.secret).models.list()).object, 'list', 'its place came back');
});

/** Sends `body` in `pieces` pieces, `gapMs` apart, on a raw socket, and returns the parsed answer. */
async function steadyCall(secret: string, path: string, type: string, body: Buffer, pieces: number, gapMs: number) {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  let reply = '';
  socket.on('data', (d: Buffer) => (reply += d.toString('utf8')));
  const ended = new Promise((resolve) => socket.once('close', resolve));
  socket.write(
    `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: ${type}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
  );
  const size = Math.ceil(body.length / pieces);
  for (let at = 0; at < body.length; at += size) {
    await sleep(gapMs);
    socket.write(body.subarray(at, at + size));
  }
  await Promise.race([ended, sleep(15_000)]);
  socket.destroy();
  return parseRawHeaders(reply);
}

t.test('bodies that arrive slowly but steadily are not cut, however long they take in all', async (t) => {
  // Each gap is a third of bodyIdleMs; the whole body takes more than twice bodyIdleMs.
  const gap = BODY_IDLE_MS / 3;
  const chat = Buffer.from(JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: 'x'.repeat(4000) }] }));
  const answer = await steadyCall(other.secret, '/v1/chat/completions', 'application/json', chat, 7, gap);
  t.equal(answer.status, 404, 'the whole JSON body was read and the call went on to resolve its model');

  const line = 'Statements are kept for ten years and complaints are answered within five working days.\n';
  const text = line.repeat(Math.ceil((256 * 1024) / line.length));
  const multipart = Buffer.from(
    '--b\r\nContent-Disposition: form-data; name="knowledge_base"\r\n\r\npolicies\r\n' +
      `--b\r\nContent-Disposition: form-data; name="file"; filename="policies.txt"\r\nContent-Type: text/plain\r\n\r\n${text}\r\n--b--\r\n`,
  );
  const uploaded = await steadyCall(uploader.secret, '/v1/documents', 'multipart/form-data; boundary=b', multipart, 7, gap);
  t.equal(uploaded.status, 201, `a 256 KiB upload in seven pieces is ingested: ${uploaded.body.slice(0, 200)}`);
});
