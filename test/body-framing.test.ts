// A request body that Node's HTTP parser cannot read to its end (the client ends its side before the body Content-Length
// announced, a chunked body whose framing is broken) fails after the call has begun: it has a request id, a key, an
// in-flight place and an audit entry. The answer must be that call's: its X-Request-Id is the one its audit entry
// names (SPEC: "the same id is in the audit entry"), the entry records the status the client got, and the connection
// closes, which gives the call's place back. Raw sockets, since no client library sends these.
import net from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { ID_HEADERS, parseRawHeaders, request } from './helpers/http.js';

const dataDir = tempDir(t);
const { secret } = createKey(dataDir);
const config = join(dataDir, 'config.json');
// A ceiling of 4: a call whose place was not given back shows at once.
writeFileSync(config, JSON.stringify({ limits: { maxInFlight: 4, minShare: 4 } }));
const daemon = await startDaemon(t, ['--config', config, '--data-dir', dataDir]);
const port = Number(new URL(daemon.origin).port);
const head = (framing: string) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\n${framing}\r\n`;

/** Sends `first`, then after a moment `then` (or ends its side when `then` is null); resolves with what came back. */
async function exchange(first: string, then: string | null): Promise<{ reply: string; closedByDaemon: boolean }> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.on('error', () => {});
  let reply = '';
  socket.on('data', (d: Buffer) => (reply += d.toString('latin1')));
  const closed = new Promise<boolean>((resolve) => socket.once('close', () => resolve(true)));
  socket.write(first);
  await new Promise((resolve) => setTimeout(resolve, 200));
  if (then === null) socket.end();
  else socket.write(then);
  // The client keeps its side open (unless it ended it): the daemon must close the connection itself.
  const closedByDaemon = await Promise.race([closed, new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 4000))]);
  socket.destroy();
  return { reply, closedByDaemon };
}

/** The call entry of the log naming `requestId`, once it is there (the CLI reads the log the daemon writes). */
async function entryOf(requestId: string): Promise<{ kind: string; status: number; request_id: string } | undefined> {
  for (let i = 0; i < 12; i++) {
    const out = join(dataDir, `export-${requestId}-${i}`);
    const exported = cli(['audit', 'export', '--out', out, '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software' });
    if (exported.code === 0) {
      const entries = readFileSync(join(out, 'entries.jsonl'), 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { kind: string; status: number; request_id: string });
      const found = entries.find((e) => e.kind === 'call' && e.request_id === requestId);
      if (found) return found;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return undefined;
}

const body = JSON.stringify({ model: 'tiny-chat', messages: [{ role: 'user', content: 'hello' }] });
const cases: Array<[string, string, string | null]> = [
  [
    'a client that ends its side before the body Content-Length announced',
    `${head(`Content-Length: ${body.length}\r\n`)}${body.slice(0, 10)}`,
    null,
  ],
  ['a chunked body whose chunk size is not hexadecimal', `${head('Transfer-Encoding: chunked\r\n')}5\r\n{"mod\r\n`, 'zz\r\nhello\r\n'],
];

for (const [what, first, then] of cases) {
  t.test(`${what}: answered as its call, with the id its audit entry names`, async (t) => {
    const { reply, closedByDaemon } = await exchange(first, then);
    const parsed = parseRawHeaders(reply);
    t.equal(parsed.status, 400, reply);
    for (const h of ID_HEADERS) t.ok(parsed.headers[h], `${h} on the answer`);
    t.match(JSON.parse(parsed.body), { error: { type: 'invalid_request_error', code: 'invalid_request_error' } });
    t.match(JSON.parse(parsed.body).error.message, /body/, 'the message says what was wrong: the body');
    t.ok(closedByDaemon, 'the daemon closed the connection');
    const entry = await entryOf(parsed.headers['x-request-id']);
    t.ok(entry, `the audit log has an entry for the X-Request-Id the client got (${parsed.headers['x-request-id']})`);
    t.equal(entry?.status, 400, 'which records the status the client got');
  });
}

t.test('every place was given back', async (t) => {
  const statuses = await Promise.all(
    Array.from(
      { length: 4 },
      async () => (await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } })).status,
    ),
  );
  t.same(statuses, [200, 200, 200, 200]);
});
