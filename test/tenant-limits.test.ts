// A tenant cannot multiply its quota by making more projects and keys: a dashboard member may create at most
// limits.maxProjectsPerAccount projects and limits.maxKeysPerProject active keys in each (refused with 403 and a
// message that says why, even when asked for all at once), an administrator is not capped, and on the metered
// postures every key of a project draws on the project's limits (limits.defaultProjectRpm/Tpm, or the project's own
// set by the operator with `sovereign projects limits`), which no member can change.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import t from 'tap';
import { ApiError } from '../daemon/errors/index.js';
import { KeyLimits } from '../daemon/limits/index.js';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { DashboardClient } from './helpers/dashboard.js';
import { fetchTrusting, selfSignedCert } from './helpers/tls.js';

const PASSWORD = 'correct horse battery staple 7';
const PROJECT_RPM = 5;
const dir = tempDir(t, 'sov-tenant-');
const tls = selfSignedCert(dir);
const dataDir = join(dir, 'data');
const config = join(dir, 'cloud.json');
writeFileSync(
  config,
  JSON.stringify({
    posture: 'cloud',
    region: 'sa-riyadh-1',
    listen: { host: '127.0.0.1', port: 0 },
    tls: { cert: tls.cert, key: tls.key },
    dataDir,
    modelsDir: join(dir, 'no-models'),
    limits: { maxProjectsPerAccount: 3, maxKeysPerProject: 2, defaultProjectRpm: PROJECT_RPM },
  }),
);
const withConfig = ['--config', config];
// Three keys of one project, each allowed far more than the project's 5 requests a minute; one key elsewhere.
const shared = [createKey(dataDir, 'shared', withConfig), createKey(dataDir, 'shared', withConfig)];
shared.push(createKey(dataDir, 'shared', [...withConfig, '--rpm', '1000']));
const elsewhere = createKey(dataDir, 'elsewhere', withConfig);
const admin = cli(['admin', 'create', '--email', 'op@bank.example', '--password-stdin', ...withConfig], {}, `${PASSWORD}\n`);
if (admin.code !== 0) throw new Error(`admin create failed: ${admin.stderr}`);
const daemon = await startDaemon(t, withConfig);

const fetchWithCa = fetchTrusting(t, tls.ca);
const client = (secret: string) =>
  new OpenAI({
    apiKey: secret,
    baseURL: daemon.baseURL,
    maxRetries: 0,
    fetch: fetchWithCa,
  });
/** The models list through the openai client, or the APIError it rejected with. */
const models = (secret: string) =>
  client(secret)
    .models.list()
    .withResponse()
    .then(
      ({ response }) => ({ status: response.status, headers: response.headers, message: '' }),
      (err: InstanceType<typeof OpenAI.APIError>) => ({ status: err.status, headers: err.headers ?? new Headers(), message: err.message }),
    );

async function member(email: string, project: string): Promise<DashboardClient> {
  const browser = new DashboardClient(daemon.origin, tls.ca);
  await browser.open();
  const signed = await browser.call('POST', '/signup', { email, password: PASSWORD, project });
  if (signed.status !== 201) throw new Error(`sign-up failed: ${signed.text}`);
  return browser;
}

t.test('a member creates at most limits.maxProjectsPerAccount projects, even all at once', async (t) => {
  const browser = await member('many@bank.example', 'many-1');
  t.equal((await browser.call('POST', '/projects', { name: 'many-2' })).status, 201);
  t.equal((await browser.call('POST', '/projects', { name: 'many-3' })).status, 201);
  const refused = await browser.call('POST', '/projects', { name: 'many-4' });
  t.equal(refused.status, 403, 'the fourth project is refused');
  t.equal(refused.json.error.code, 'permission_denied');
  t.match(refused.json.error.message, /already has 3 projects.*limits\.maxProjectsPerAccount/);
  t.same(
    (await browser.call('GET', '/projects')).json.data.map((p: { name: string }) => p.name),
    ['many-1', 'many-2', 'many-3'],
  );
  t.notMatch(cli(['projects', 'list', ...withConfig]).stdout, /many-4/, 'the refused project was not left behind');

  const racer = await member('racer@bank.example', 'race-0');
  const raced = await Promise.all(Array.from({ length: 6 }, (_, i) => racer.call('POST', '/projects', { name: `race-${i + 1}` })));
  t.equal(raced.filter((r) => r.status === 201).length, 2, 'six asked at once: only the two the cap leaves are made');
  t.ok(
    raced.every((r) => r.status === 201 || r.status === 403),
    raced.map((r) => r.status).join(' '),
  );
  t.equal((await racer.call('GET', '/projects')).json.data.length, 3);
});

t.test('a member has at most limits.maxKeysPerProject active keys in a project, the chat app’s included', async (t) => {
  const browser = await member('keys@bank.example', 'keyed');
  const first = await browser.call('POST', '/keys', { project: 'keyed', name: 'one' });
  t.equal(first.status, 201);
  t.equal((await browser.call('POST', '/keys', { project: 'keyed', name: 'two' })).status, 201);
  const third = await browser.call('POST', '/keys', { project: 'keyed', name: 'three' });
  t.equal(third.status, 403, 'a third active key is refused');
  t.equal(third.json.error.code, 'permission_denied');
  t.match(third.json.error.message, /already has 2 active keys.*limits\.maxKeysPerProject.*Revoke a key/);
  const chat = await browser.call('POST', '/chat-key', { project: 'keyed' });
  t.equal(chat.status, 403, 'the chat app’s key would be one more');

  t.equal((await browser.call('POST', `/keys/${first.json.key.id}/revoke`)).status, 200);
  t.equal((await browser.call('POST', '/keys', { project: 'keyed', name: 'three' })).status, 201, 'a revoked key frees its place');
  t.equal((await browser.call('GET', '/keys?project=keyed')).json.data.filter((k: { status: string }) => k.status === 'active').length, 2);
});

t.test('an administrator is not capped', async (t) => {
  const browser = new DashboardClient(daemon.origin, tls.ca);
  await browser.open();
  t.equal((await browser.call('POST', '/login', { email: 'op@bank.example', password: PASSWORD })).status, 200);
  for (let i = 1; i <= 4; i++) t.equal((await browser.call('POST', '/projects', { name: `ops-${i}` })).status, 201, `project ${i}`);
  for (let i = 1; i <= 3; i++) t.equal((await browser.call('POST', '/keys', { project: 'ops-1' })).status, 201, `key ${i}`);
});

t.test("a project's keys share the project's rate limit; only the operator changes it", async (t) => {
  const answers = [];
  for (let i = 0; i < PROJECT_RPM + 1; i++) answers.push(await models(shared[i % shared.length].secret));
  t.same(
    answers.map((a) => a.status),
    [200, 200, 200, 200, 200, 429],
    `${PROJECT_RPM} calls a minute between three keys that may each make 600 or more`,
  );
  const refused = answers.at(-1)!;
  t.match(refused.message, new RegExp(`project proj_\\w+: ${PROJECT_RPM} requests per minute, shared by all its keys`));
  t.equal(refused.headers.get('x-ratelimit-limit-requests'), String(PROJECT_RPM), "the headers describe the project's limit");
  t.match(refused.headers.get('retry-after'), /^[1-9]\d*$/);
  t.equal(answers[0].headers.get('x-ratelimit-remaining-requests'), String(PROJECT_RPM - 1), 'what remains is what the project has left');
  t.equal((await models(elsewhere.secret)).status, 200, "another project's key has its own");

  // A member may set its keys' own limits, but those never lift the project's.
  const owner = await member('shared@bank.example', 'owned');
  const mine = (await owner.call('POST', '/keys', { project: 'owned', rpm: 600 })).json;
  for (let i = 0; i < PROJECT_RPM; i++) await models(mine.secret);
  t.equal((await models(mine.secret)).status, 429, "a member's project is held to the default project limit");
  t.equal((await owner.call('POST', '/projects/owned/limits', { rpm: 100000 })).status, 404, 'no member can change it');

  const raised = cli(['projects', 'limits', 'shared', '--rpm', '100', ...withConfig, '--json']);
  t.equal(raised.code, 0, raised.stderr);
  t.equal(raised.json.rpm, 100);
  const after = await models(shared[0].secret);
  t.equal(after.status, 200, 'the operator raised it: applied on the running daemon at once');
  t.equal(after.headers.get('x-ratelimit-limit-requests'), '100');
  t.match(cli(['projects', 'list', ...withConfig]).stdout, /shared\s+100\s+6000000 \(default\)/, 'projects list shows both limits');
  t.equal(cli(['projects', 'limits', 'shared', '--rpm', 'default', ...withConfig, '--json']).json.rpm, null, 'and back to the default');
  t.equal(cli(['projects', 'limits', 'nowhere', '--rpm', '5', ...withConfig]).code, 1, 'an unknown project is an error');
  t.equal(cli(['projects', 'limits', 'shared', ...withConfig]).code, 2, 'a limit must be given');
});

t.test("token reservations draw on the key's and the project's limits together", async (t) => {
  const limits = new KeyLimits();
  const project = { id: 'proj_t', rpm: 100, tpm: 1000 };
  const one = { keyId: 'key_one', rpm: 100, tpm: 800, project };
  const two = { keyId: 'key_two', rpm: 100, tpm: 800, project };
  const now = 1_000_000;
  const first = await limits.reserveTokens(one, 600, now);
  t.equal(first['x-ratelimit-remaining-tokens'], '200', "the key's 200 left are fewer than the project's 400");
  const refused = await Promise.resolve()
    .then(() => limits.reserveTokens(two, 600, now))
    .catch((err: unknown) => err);
  t.ok(refused instanceof ApiError && refused.status === 429, "the other key's own limit has room, the project's has not");
  t.match((refused as ApiError).message, /project proj_t: 1000 tokens per minute, shared by all its keys/);
  t.equal((refused as ApiError).headers['x-ratelimit-limit-tokens'], '1000');
  t.equal((await limits.reserveTokens(two, 400, now))['x-ratelimit-remaining-tokens'], '0', 'what fits in both is taken from both');
  limits.settleTokens(one, 600, 100, now);
  t.equal((await limits.reserveTokens(two, 300, now))['x-ratelimit-remaining-tokens'], '100', "settling gave the project's tokens back");
  const never = await Promise.resolve()
    .then(() => limits.reserveTokens({ keyId: 'key_big', rpm: 100, tpm: 5000, project }, 2000, now))
    .catch((err: unknown) => err);
  t.match((never as ApiError).message, /more than the 1000 tokens per minute allowed for project proj_t/);
});
