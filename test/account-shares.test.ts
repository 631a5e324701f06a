// A dashboard member cannot take every in-flight place by spreading its calls over the projects it may create: the
// projects a member made share the account's share of the places (limits.accountShare), as a project's keys share the
// project's. A member with two projects of two keys each, trickling the bodies of more calls than the device serves at
// once, holds the account's share and gets 429 past it, while a key of another tenant is still served. Over HTTPS on
// the cloud posture (where members sign themselves up); raw TLS sockets to loopback for the slow calls.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import tls from 'node:tls';
import t from 'tap';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { DashboardClient } from './helpers/dashboard.js';
import { parseRawHeaders, request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const PASSWORD = 'correct horse battery staple 7';
const dir = tempDir(t, 'sov-account-shares-');
const cert = selfSignedCert(dir);
const dataDir = join(dir, 'data');
const config = join(dir, 'cloud.json');
writeFileSync(
  config,
  JSON.stringify({
    posture: 'cloud',
    region: 'sa-riyadh-1',
    listen: { host: '127.0.0.1', port: 0 },
    tls: { cert: cert.cert, key: cert.key },
    dataDir,
    modelsDir: join(dir, 'no-models'),
    // A ceiling of 16: a key holds at most 4 places, a project 8, an account's projects together 8.
    limits: { maxInFlight: 16 },
    // The slow calls' bodies are not cut off while the test looks at who holds the places.
    timeouts: { bodyIdleMs: 60_000 },
  }),
);
const other = createKey(dataDir, 'other-tenant', ['--config', config]);
const daemon = await startDaemon(t, ['--config', config]);
const port = Number(new URL(daemon.origin).port);

interface SlowCall {
  socket: tls.TLSSocket;
  reply: string;
}

/** A POST whose declared body never comes: the call waits for it, holding its place. */
async function slowCall(secret: string): Promise<SlowCall> {
  const socket = tls.connect({ host: '127.0.0.1', port, ca: cert.ca });
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  const call: SlowCall = { socket, reply: '' };
  socket.on('data', (d: Buffer) => (call.reply += d.toString('latin1')));
  socket.on('error', () => {});
  socket.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${secret}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"mo`,
  );
  return call;
}

t.test("a member's projects together hold at most the account's share; other tenants are still served", async (t) => {
  const browser = new DashboardClient(daemon.origin, cert.ca);
  await browser.open();
  t.equal((await browser.call('POST', '/signup', { email: 'spread@bank.example', password: PASSWORD, project: 'spread-1' })).status, 201);
  t.equal((await browser.call('POST', '/projects', { name: 'spread-2' })).status, 201);
  const keys: string[] = [];
  for (const project of ['spread-1', 'spread-1', 'spread-2', 'spread-2']) {
    const made = await browser.call('POST', '/keys', { project });
    t.equal(made.status, 201);
    keys.push(made.json.secret as string);
  }

  // Four calls per key: each key within its share (4), each project within its own (8), 16 in all: the whole ceiling.
  const calls: SlowCall[] = [];
  t.teardown(() => calls.forEach((c) => c.socket.destroy()));
  for (const secret of keys) for (let i = 0; i < 4; i++) calls.push(await slowCall(secret));
  for (const until = Date.now() + 3000; Date.now() < until && calls.filter((c) => c.reply).length < 8;) await sleep(20);

  const refused = calls.filter((c) => c.reply && parseRawHeaders(c.reply).status === 429);
  t.equal(refused.length, 8, 'past the account’s 8 places, its calls get 429');
  const error = JSON.parse(parseRawHeaders(refused[0]?.reply ?? 'HTTP/1.1 0 x\r\n\r\n{}').body || '{}').error;
  t.equal(error?.code, 'rate_limit_exceeded');
  t.match(error?.message, /Account usr_\w+ already has 8 calls in progress across its projects.*limits\.accountShare/);
  t.equal(calls.filter((c) => c.reply === '').length, 8, 'the account holds its share of the places (8 of 16)');

  const served = await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${other.secret}` }, ca: cert.ca });
  t.equal(served.status, 200, 'another tenant’s key is served while the flood lasts');
});
