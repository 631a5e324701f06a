// Keys and projects through the CLI, and their effect on a running daemon (no restart).
import t from 'tap';
import OpenAI from 'openai';
import { Client } from 'undici';
import { authenticate } from '../daemon/auth/index.js';
import { KeyRegistry } from '../daemon/keys/index.js';
import { digestMatches, hashSecret, secretDigest } from '../daemon/keys/secrets.js';
import { openStore } from '../daemon/store/index.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';

const dataDir = tempDir(t);
const d = ['--data-dir', dataDir];

t.test('projects create and list, with --json; duplicates and bad names refused', async (t) => {
  const created = cli(['projects', 'create', 'ministry', ...d, '--json']);
  t.equal(created.code, 0, created.stderr);
  t.match(created.json, { id: /^proj_/, name: 'ministry' });
  const dup = cli(['projects', 'create', 'ministry', ...d]);
  t.equal(dup.code, 1);
  t.match(dup.stderr, /already exists/);
  const bad = cli(['projects', 'create', 'no spaces!', ...d]);
  t.equal(bad.code, 1);
  t.match(bad.stderr, /project name/);
  const list = cli(['projects', 'list', ...d, '--json']);
  t.same(
    list.json.map((p: { name: string }) => p.name),
    ['ministry'],
  );
  t.match(cli(['projects', 'list', ...d]).stdout, /ministry/);
});

t.test('keys create prints the secret once; list never shows it or its hash', async (t) => {
  const r = cli(['keys', 'create', '--project', 'ministry', '--rpm', '30', ...d, '--json']);
  t.equal(r.code, 0, r.stderr);
  t.match(r.json, { id: /^key_[a-z2-7]{16}$/, projectName: 'ministry', rpm: 30, status: 'active' });
  t.match(r.json.secret, /^sk-sov-[a-z2-7]{16}-[A-Za-z0-9_-]{43}$/);
  const text = cli(['keys', 'create', '--project', 'ministry', ...d]);
  t.match(text.stdout, /shown once/);
  const list = cli(['keys', 'list', ...d, '--json']);
  t.equal(list.json.length, 2);
  const dump = JSON.stringify(list.json) + cli(['keys', 'list', ...d]).stdout;
  t.notMatch(dump, r.json.secret, 'no secret in listings');
  t.notMatch(dump, /hash/, 'no hash in listings');
  t.notMatch(dump, r.json.secret.slice(-20), 'not even a long part of the secret');
});

t.test('keys create for a missing project says how to create it', async (t) => {
  const r = cli(['keys', 'create', '--project', 'nope', ...d]);
  t.equal(r.code, 1);
  t.match(r.stderr, /projects create nope/);
});

t.test('every command has --help; usage errors exit 2', async (t) => {
  for (const args of [['--help'], ['serve', '--help'], ['keys', '--help'], ['projects', '--help'], ['config', '--help']]) {
    const r = cli(args);
    t.equal(r.code, 0, `${args.join(' ')} exits 0`);
    t.match(r.stdout, /Usage: sovereign/, `${args.join(' ')} prints usage`);
  }
  t.equal(cli(['frobnicate']).code, 2);
  t.equal(cli(['keys', 'create', '--bogus', ...d]).code, 2);
  t.equal(cli(['keys', 'create', '--project', 'ministry', '--rpm', 'lots', ...d]).code, 2);
  const json = cli(['keys', 'rotate', 'key_doesnotexist00', ...d, '--json']);
  t.equal(json.code, 1);
  t.match(json.json, { error: { kind: 'not_found' } });
});

t.test('rotate and revoke act on a running daemon within a second, and touch no other key', async (t) => {
  const a = createKey(dataDir, 'ministry');
  const b = createKey(dataDir, 'ministry');
  const c = createKey(dataDir, 'ministry');
  const daemon = await startDaemon(t, d);
  const status = async (secret: string) =>
    (await request(`${daemon.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } })).status;
  /** Polls for up to one second: the change must show within that. */
  const within1s = async (secret: string, expected: number) => {
    const until = Date.now() + 1000;
    let s = await status(secret);
    while (s !== expected && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 50));
      s = await status(secret);
    }
    return s;
  };
  t.equal(await status(a.secret), 200);

  const rotated = cli(['keys', 'rotate', a.id, ...d, '--json']);
  t.equal(rotated.code, 0, rotated.stderr);
  t.equal(rotated.json.id, a.id, 'same public id');
  t.not(rotated.json.secret, a.secret);
  t.equal(await within1s(a.secret, 401), 401, 'the old secret stops working');
  t.equal(await status(rotated.json.secret), 200, 'the new one works');

  const graced = cli(['keys', 'rotate', b.id, '--grace', '30', ...d, '--json']);
  t.equal(graced.code, 0);
  t.ok(graced.json.graceUntil, 'listing shows the grace period');
  t.equal(await status(b.secret), 200, 'the old secret still works during the grace period');
  t.equal(await within1s(graced.json.secret, 200), 200, 'and so does the new one');
  const again = cli(['keys', 'rotate', b.id, ...d, '--json']);
  t.equal(await within1s(b.secret, 401), 401, 'a second rotation ends the first grace');
  t.equal(await within1s(graced.json.secret, 401), 401, 'without grace the previous secret stops at once');
  t.equal(await status(again.json.secret), 200);

  t.equal(cli(['keys', 'revoke', c.id, ...d]).code, 0);
  t.equal(await within1s(c.secret, 401), 401, 'a revoked key stops working');
  t.equal(await status(rotated.json.secret), 200, 'other keys are untouched');
  t.equal(await status(again.json.secret), 200, 'other keys are untouched');
  t.equal(cli(['keys', 'rotate', c.id, ...d]).code, 1, 'a revoked key cannot be rotated back to life');

  const sdk = new OpenAI({ apiKey: c.secret, baseURL: daemon.baseURL, maxRetries: 0 });
  const err = await sdk.models.list().catch((e) => e);
  t.ok(err instanceof OpenAI.AuthenticationError, 'the SDK sees a 401');
  t.equal(err.code, 'invalid_api_key');
});

t.test(
  'calls on one keep-alive connection are each checked: another key, a revocation or a rotation applies to the next one',
  async (t) => {
    // The daemon remembers the header a connection last authenticated with, so that its next calls skip hashing the
    // secret; none of that may let a call through that a new connection would refuse. (A 401 closes the connection.)
    const a = createKey(dataDir, 'ministry');
    const b = createKey(dataDir, 'ministry');
    const c = createKey(dataDir, 'ministry');
    const daemon = await startDaemon(t, d);
    const client = new Client(new URL(daemon.baseURL).origin);
    t.teardown(() => client.close());
    let connections = 0;
    client.on('connect', () => connections++);
    const status = async (secret: string) => {
      const r = await client.request({ method: 'GET', path: '/v1/models', headers: { authorization: `Bearer ${secret}` } });
      await r.body.dump();
      return r.statusCode;
    };
    const wrong = (secret: string) => `${secret.slice(0, -1)}${secret.endsWith('A') ? 'B' : 'A'}`;

    t.equal(await status(a.secret), 200);
    t.equal(await status(a.secret), 200, 'the same key again');
    t.equal(await status(b.secret), 200, 'another key');
    t.equal(await status(a.secret), 200, 'and back');
    t.equal(cli(['keys', 'revoke', a.id, ...d]).code, 0);
    t.equal(await status(a.secret), 401, 'revoked by another process: the very next call is refused');
    t.equal(connections, 1, 'all of that on one connection');

    t.equal(await status(b.secret), 200);
    t.equal(await status(b.secret), 200);
    t.equal(await status(wrong(b.secret)), 401, 'a wrong secret right after the right one');
    t.equal(connections, 2);

    t.equal(await status(c.secret), 200);
    t.equal(await status(c.secret), 200);
    const graced = cli(['keys', 'rotate', c.id, '--grace', '30', ...d, '--json']);
    t.equal(graced.code, 0, graced.stderr);
    t.equal(await status(c.secret), 200, 'the old secret during the grace period');
    t.equal(await status(c.secret), 200, 'again');
    t.equal(cli(['keys', 'rotate', c.id, ...d]).code, 0);
    t.equal(await status(c.secret), 401, 'a second rotation ends the grace: the next call with the old secret is refused');
    t.equal(connections, 3, 'the grace period and its end on one connection');
    t.equal(await status(b.secret), 200, 'the other keys still work');

    // A grace period also ends by itself, with no change to any key.
    t.equal(cli(['keys', 'rotate', b.id, '--grace', '2', ...d]).code, 0);
    const rotated = Date.now();
    t.equal(await status(b.secret), 200, 'the old secret in a grace period of two seconds');
    t.equal(await status(b.secret), 200, 'again');
    await new Promise((r) => setTimeout(r, rotated + 2200 - Date.now()));
    t.equal(await status(b.secret), 401, 'refused once the grace period is over');
    t.equal(connections, 4, 'on the connection that used it during the grace period');
  },
);

t.test('a previous secret accepted in the last millisecond of its grace period is not remembered by its connection', async (t) => {
  // Only a match by the current secret is remembered: a grace period ends at a time, which no key change marks.
  const store = openStore(tempDir(t));
  t.teardown(() => store.close());
  const keys = new KeyRegistry(store);
  await keys.createProject('grace');
  const { key, secret } = await keys.createKey({ project: 'grace' });
  const rotated = await keys.rotateKey(key.id, 60);
  const until = Date.parse(rotated.key.graceUntil!);
  const realNow = Date.now;
  t.teardown(() => (Date.now = realNow));
  // The call's first look at the clock is a millisecond before the grace period ends, any later one at its end.
  const reads = [until - 1];
  Date.now = () => reads.shift() ?? until;
  const connection = {};
  t.equal(authenticate(`Bearer ${secret}`, keys, connection).keyId, key.id, 'accepted a millisecond before the end');
  Date.now = () => until + 3_600_000;
  t.throws(() => authenticate(`Bearer ${secret}`, keys, connection), { code: 'invalid_api_key' }, 'refused on that connection later');
  t.throws(() => authenticate(`Bearer ${secret}`, keys, {}), { code: 'invalid_api_key' }, 'as on a new one');
  t.equal(authenticate(`Bearer ${rotated.secret}`, keys, connection).keyId, key.id, 'the new secret works');
});

t.test('bad keys are 401 invalid_api_key, never anything else', async (t) => {
  const daemon = await startDaemon(t, d);
  const { secret } = createKey(dataDir, 'ministry');
  const cases: Array<[string, string | undefined]> = [
    ['missing', undefined],
    ['empty bearer', 'Bearer '],
    ['wrong scheme', `Basic ${secret}`],
    ['unknown key of the right shape', `Bearer sk-sov-aaaaaaaaaaaaaaaa-${'A'.repeat(43)}`],
    ['right id, wrong secret', `Bearer ${secret.slice(0, -1)}${secret.endsWith('A') ? 'B' : 'A'}`],
    ['truncated', `Bearer ${secret.slice(0, 30)}`],
    ['odd characters', 'Bearer sk-sov-"\'<>%00;DROP TABLE keys;--'],
    ['latin-1 bytes', 'Bearer sk-sov-\u00e9\u00ff\u00a0'],
    ['very long', `Bearer ${'x'.repeat(6000)}`],
    ['two tokens', `Bearer ${secret} ${secret}`],
  ];
  for (const [name, header] of cases) {
    const r = await request(`${daemon.baseURL}/models`, { headers: header === undefined ? {} : { authorization: header } });
    t.equal(r.status, 401, name);
    t.equal(r.json?.error?.code, 'invalid_api_key', name);
    t.ok(r.headers['x-request-id'], `${name}: x-request-id`);
  }
  t.equal(
    (await request(`${daemon.baseURL}/models`, { headers: { authorization: `bearer  ${secret}` } })).status,
    200,
    'scheme is case-insensitive',
  );
});

t.test("a presented secret's digest matches the stored hash of that secret only", async (t) => {
  const secret = `sk-sov-abcdefghijklmnop-${'Q'.repeat(43)}`;
  const stored = hashSecret(secret).toString('base64');
  t.ok(digestMatches(secretDigest(secret), stored), 'the same secret');
  t.notOk(digestMatches(secretDigest(`${secret.slice(0, -1)}R`), stored), 'one character different');
  // Differences anywhere in the digest count, not only in its first characters. (The 43rd of its 44 characters
  // carries two padding bits, so the 42nd is the last that holds only digest bits.)
  const last = stored.slice(0, 41) + (stored[41] === 'A' ? 'B' : 'A') + stored.slice(42);
  t.notOk(digestMatches(secretDigest(secret), last), 'the stored digest differing near its end');
  const first = (stored[0] === 'A' ? 'B' : 'A') + stored.slice(1);
  t.notOk(digestMatches(secretDigest(secret), first), 'the stored digest differing in its first character');
  t.notOk(digestMatches(secretDigest(secret), undefined), 'no stored hash (an unknown key)');
  t.notOk(digestMatches(secretDigest(secret), stored.slice(0, 20)), 'a stored digest of the wrong length');
  t.notOk(digestMatches('\0'.repeat(44), undefined), 'the stand-in for an absent key never matches');
});
