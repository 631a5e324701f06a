// The dashboard's API and pages as served by a running daemon, checked over HTTP without a browser: sessions in
// HttpOnly, Secure, SameSite cookies; every change refused without the session's CSRF token; sign-up only where
// the posture allows it and operator accounts from `sovereign admin create` elsewhere; sign-in rate-limited; keys
// created, rotated, limited and revoked with effect on /v1; each account sees only its own projects; the chat
// app's key dies with its session; no secret or password in the logs.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { cli, startDaemon, tempDir } from './helpers/daemon.js';
import { DashboardClient } from './helpers/dashboard.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const PASSWORD = 'correct horse battery staple 7';
const dir = tempDir(t, 'sov-dashboard-');
const tls = selfSignedCert(dir);
const cloudConfig = join(dir, 'cloud.json');
writeFileSync(
  cloudConfig,
  JSON.stringify({
    posture: 'cloud',
    region: 'sa-riyadh-1',
    listen: { host: '127.0.0.1', port: 0 },
    tls: { cert: tls.cert, key: tls.key },
    dataDir: join(dir, 'cloud-data'),
    modelsDir: join(dir, 'no-models'),
  }),
);
const cloud = await startDaemon(t, ['--config', cloudConfig]);
const models = (secret: string) =>
  request(`${cloud.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` }, ca: tls.ca }).then((r) => r.status);

t.test('the pages are served with a strict content security policy; app routes fall back to the page', async (t) => {
  const page = await request(`${cloud.origin}/dashboard/`, { ca: tls.ca });
  t.equal(page.status, 200);
  t.match(page.headers['content-type'], /text\/html/);
  t.match(page.headers['content-security-policy'], /default-src 'self'; script-src 'self'/);
  t.equal(page.headers['x-frame-options'], 'DENY');
  t.equal(page.headers['x-region'], 'sa-riyadh-1', 'our headers on dashboard responses too');
  const script = /src="(\/dashboard\/assets\/[^"]+\.js)"/.exec(page.text)?.[1];
  t.ok(script, 'the page loads its script from the daemon');
  const asset = await request(`${cloud.origin}${script}`, { ca: tls.ca });
  t.equal(asset.status, 200);
  t.match(asset.headers['cache-control'], /immutable/);
  const route = await request(`${cloud.origin}/dashboard/keys`, { ca: tls.ca });
  t.equal(route.text, page.text, 'a reload on an app route gets the page');
  const missing = await request(`${cloud.origin}/dashboard/assets/nope.js`, { ca: tls.ca });
  t.equal(missing.status, 404);
  t.equal(missing.json.error.code, 'not_found');
  const root = await request(`${cloud.origin}/`, { ca: tls.ca });
  t.equal(root.status, 302);
  t.equal(root.headers.location, '/dashboard/');
});

t.test('sign-up on cloud: CSRF first, then a session in a Secure HttpOnly SameSite cookie', async (t) => {
  const browser = new DashboardClient(cloud.origin, tls.ca);
  const opened = await browser.open();
  t.equal(opened.json.user, null);
  t.equal(opened.json.signup, true, 'self-serve sign-up on cloud');
  t.equal(opened.json.csrf, browser.csrf, 'the page reads the CSRF token the cookie holds');
  t.match(
    browser.lastSetCookie[0],
    /^__Host-sov_csrf=[\w-]{43}; Path=\/; SameSite=Strict; Max-Age=\d+; Secure$/,
    'the CSRF cookie is readable by the page',
  );

  const forged = await browser.call('POST', '/signup', { email: 'a@bank.example', password: PASSWORD, project: 'alpha' }, { csrf: null });
  t.equal(forged.status, 403);
  t.equal(forged.json.error.code, 'csrf_token_invalid');
  const wrong = await browser.call(
    'POST',
    '/signup',
    { email: 'a@bank.example', password: PASSWORD, project: 'alpha' },
    { csrf: 'x'.repeat(43) },
  );
  t.equal(wrong.status, 403);

  const weak = await browser.call('POST', '/signup', { email: 'a@bank.example', password: 'short', project: 'alpha' });
  t.equal(weak.status, 400);
  t.match(weak.json.error.message, /at least 12 characters/);

  const signed = await browser.call('POST', '/signup', { email: 'A@Bank.example', password: PASSWORD, project: 'alpha' });
  t.equal(signed.status, 201, 'the project name was not left taken by the refused attempt');
  t.equal(signed.json.user.email, 'a@bank.example');
  const session = browser.lastSetCookie.find((c) => c.startsWith('__Host-sov_session='));
  t.match(session, /; SameSite=Strict; Max-Age=\d+; HttpOnly; Secure$/);
  t.notMatch(JSON.stringify(signed.json), /passwordHash|scrypt/, 'no hash in the answer');

  const again = new DashboardClient(cloud.origin, tls.ca);
  await again.open();
  const duplicate = await again.call('POST', '/signup', { email: 'a@bank.example', password: PASSWORD, project: 'beta' });
  t.equal(duplicate.status, 409);
  t.equal(duplicate.json.error.code, 'conflict');

  const me = await browser.call('GET', '/session');
  t.equal(me.json.user.email, 'a@bank.example');
  t.not(me.json.csrf, opened.json.csrf, 'signing in gives the session its own CSRF token');
});

t.test('keys from the dashboard act on /v1 at once; every change needs the CSRF token', async (t) => {
  const browser = new DashboardClient(cloud.origin, tls.ca);
  await browser.open();
  t.equal((await browser.call('POST', '/signup', { email: 'keys@bank.example', password: PASSWORD, project: 'keys-proj' })).status, 201);
  const projects = await browser.call('GET', '/projects');
  t.same(
    projects.json.data.map((p: { name: string }) => p.name),
    ['keys-proj'],
    'only the account’s own projects',
  );

  const created = await browser.call('POST', '/keys', { project: 'keys-proj', name: 'ci', rpm: 600, tpm: null });
  t.equal(created.status, 201);
  const { key, secret } = created.json;
  t.match(secret, /^sk-sov-/);
  t.equal(key.rpm, 600);
  t.equal(await models(secret), 200, 'the new key works');

  const listed = await browser.call('GET', '/keys?project=keys-proj');
  const row = listed.json.data.find((k: { id: string }) => k.id === key.id);
  t.ok(row.lastUsedAt, 'last used is shown after a call');
  t.notMatch(listed.text, new RegExp(secret.slice(-20)), 'listings never hold the secret');

  for (const [path, body] of [
    ['/projects', { name: 'csrf-proj' }],
    ['/keys', { project: 'keys-proj' }],
    [`/keys/${key.id}/rotate`, {}],
    [`/keys/${key.id}/revoke`, {}],
    [`/keys/${key.id}/limits`, { rpm: 1, tpm: 1 }],
    ['/chat-key', {}],
    ['/scrub', { texts: ['x'] }],
    ['/logout', {}],
  ] as const) {
    const refused = await browser.call('POST', path, body, { csrf: null });
    t.equal(refused.status, 403, `POST ${path} without a CSRF token`);
    t.equal(refused.json?.error.code, 'csrf_token_invalid');
    const other = await browser.call('POST', path, body, { csrf: 'a'.repeat(43) });
    t.equal(other.status, 403, `POST ${path} with another token`);
  }
  t.equal(await models(secret), 200, 'none of the refused changes happened');

  const rotated = await browser.call('POST', `/keys/${key.id}/rotate`, { graceSeconds: 0 });
  t.equal(rotated.status, 200);
  t.equal(rotated.json.key.id, key.id, 'same public id');
  t.equal(await models(secret), 401, 'the old secret stops at once');
  t.equal(await models(rotated.json.secret), 200);

  const limited = await browser.call('POST', `/keys/${key.id}/limits`, { rpm: 2, tpm: null });
  t.equal(limited.json.rpm, 2);
  await models(rotated.json.secret);
  await models(rotated.json.secret);
  t.equal(await models(rotated.json.secret), 429, 'the new limit applies');
  const bad = await browser.call('POST', `/keys/${key.id}/limits`, { rpm: 0, tpm: null });
  t.equal(bad.status, 400);

  const revoked = await browser.call('POST', `/keys/${key.id}/revoke`);
  t.equal(revoked.json.status, 'revoked');
  t.equal(await models(rotated.json.secret), 401, 'revoked at once');

  // Another account sees none of it and can touch none of it.
  const stranger = new DashboardClient(cloud.origin, tls.ca);
  await stranger.open();
  await stranger.call('POST', '/signup', { email: 'other@bank.example', password: PASSWORD, project: 'other-proj' });
  t.equal((await stranger.call('GET', '/keys?project=keys-proj')).status, 404);
  t.equal((await stranger.call('POST', `/keys/${key.id}/rotate`, {})).status, 404);
  t.same((await stranger.call('GET', '/keys')).json.data, []);
  t.equal((await stranger.call('POST', '/keys', { project: 'keys-proj' })).status, 404);
});

t.test('the chat app’s key is bound to the session and dies with it', async (t) => {
  const browser = new DashboardClient(cloud.origin, tls.ca);
  await browser.open();
  await browser.call('POST', '/signup', { email: 'chat@bank.example', password: PASSWORD, project: 'chat-proj' });
  const first = await browser.call('POST', '/chat-key');
  t.equal(await models(first.json.secret), 200);
  const second = await browser.call('POST', '/chat-key');
  t.equal(await models(first.json.secret), 401, 'asking again replaces the secret');
  t.equal(await models(second.json.secret), 200);

  const preview = await browser.call('POST', '/scrub', {
    texts: ['رقم هويتي 1000000008', 'again 1000000008 and SA03 8000 0000 6080 1016 7519'],
  });
  t.same(
    preview.json.texts,
    ['رقم هويتي [NATIONAL_ID]', 'again [NATIONAL_ID] and [IBAN]'],
    'the preview numbers values across the conversation',
  );

  const huge = await browser.call('POST', '/keys', { project: 'chat-proj', rpm: 1e12 });
  t.equal(huge.status, 400, 'an account cannot raise a key above the deployment’s default limits');
  t.match(huge.json.error.message, /rpm may be at most \d+/);

  // Signing in again in the same browser ends the session it had, and that session's chat key.
  const third = await browser.call('POST', '/chat-key');
  t.equal((await browser.call('POST', '/login', { email: 'chat@bank.example', password: PASSWORD })).status, 200);
  t.equal(await models(third.json.secret), 401, 'the previous session’s chat key is revoked');
  const second2 = await browser.call('POST', '/chat-key');
  t.equal(await models(second2.json.secret), 200);

  const out = await browser.call('POST', '/logout');
  t.equal(out.status, 200);
  t.equal(await models(second2.json.secret), 401, 'signing out revokes the chat key');
  const after = await browser.call('GET', '/keys');
  t.equal(after.status, 401);
  t.equal(after.json.error.code, 'not_signed_in');
});

t.test('sign-in: wrong passwords are refused alike and rate-limited; nothing secret reaches the log', async (t) => {
  const browser = new DashboardClient(cloud.origin, tls.ca);
  await browser.open();
  const unknown = await browser.call('POST', '/login', { email: 'nobody@bank.example', password: PASSWORD });
  t.equal(unknown.status, 401);
  t.equal(unknown.json.error.code, 'invalid_credentials');
  const statuses: number[] = [];
  for (let i = 0; i < 6; i++)
    statuses.push((await browser.call('POST', '/login', { email: 'a@bank.example', password: `wrong ${i} password` })).status);
  t.same(statuses.slice(0, 5), [401, 401, 401, 401, 401]);
  const limited = await browser.call('POST', '/login', { email: 'a@bank.example', password: PASSWORD });
  t.equal(limited.status, 429, 'even the right password waits once the account’s attempts are spent');
  t.ok(Number(limited.headers['retry-after']) >= 1);
  const elsewhere = await browser.call('POST', '/login', { email: 'keys@bank.example', password: PASSWORD });
  t.equal(elsewhere.status, 200, 'other accounts are not locked out');

  const logs = cloud.logs.join('\n');
  t.notMatch(logs, /correct horse|wrong \d password/, 'no password in the log');
  t.notMatch(logs, /sk-sov-[a-z2-7]{16}-[\w-]{43}/, 'no key secret in the log');
  t.notMatch(logs, /sov_session=/, 'no session cookie in the log');
  t.notMatch(logs, /__Host-sov_csrf=/, 'nor the CSRF cookie');
});

t.test('usage per key and endpoint, and the audit trail as each account may see it', async (t) => {
  const browser = new DashboardClient(cloud.origin, tls.ca);
  await browser.open();
  await browser.call('POST', '/signup', { email: 'usage@bank.example', password: PASSWORD, project: 'usage-proj' });
  const { secret, key } = (await browser.call('POST', '/keys', { project: 'usage-proj', rpm: 3 })).json;
  const calls = [];
  for (let i = 0; i < 4; i++)
    calls.push(await request(`${cloud.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` }, ca: tls.ca }));
  t.same(
    calls.map((c) => c.status),
    [200, 200, 200, 429],
  );
  const usage = await browser.call('GET', '/usage?project=usage-proj&hours=1');
  t.same(
    usage.json.keys.map((k: { id: string }) => k.id),
    [key.id],
  );
  const points = usage.json.series.filter((p: { key: string; route: string }) => p.key === key.id && p.route === '/v1/models');
  const sum = (field: string) => points.reduce((a: number, p: Record<string, number>) => a + p[field], 0);
  t.equal(sum('calls'), 4, 'every call counted');
  t.equal(sum('limited'), 1, 'the rate-limit refusal counted as such');
  t.equal((await browser.call('GET', '/usage?project=keys-proj')).status, 404, 'not another account’s project');

  const summary = await browser.call('GET', '/audit');
  t.equal(summary.json.signer, 'software');
  t.equal(summary.json.canExport, false, 'a member does not export the whole log');
  t.equal((await browser.call('GET', '/audit/anchors.json')).status, 403);
  t.equal((await browser.call('GET', '/audit/entries.jsonl')).status, 403);

  // The receipt of one's own call, found by its request id, once a checkpoint covers it.
  const requestId = String(calls[0].headers['x-request-id']);
  const leaf = Number(calls[0].headers['x-audit-leaf']);
  // A checkpoint is signed every second; a loaded machine may take longer. (Lookups are rate-limited: not polled.)
  let newest: { size: number } | undefined;
  for (let i = 0; i < 300; i++) {
    newest = (await browser.call('GET', '/audit')).json.checkpoints[0];
    if (newest && newest.size > leaf) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const receipt = await browser.call('GET', `/audit/lookup?request_id=${requestId}`);
  t.equal(receipt.status, 200, `${JSON.stringify(receipt.json).slice(0, 160)} (leaf ${leaf}, newest checkpoint ${JSON.stringify(newest)})`);
  t.equal(receipt.json.entry.request_id, requestId);
  t.equal(String(receipt.json.leaf), calls[0].headers['x-audit-leaf']);
  t.ok(receipt.json.inclusion, 'with its inclusion proof');

  const stranger = new DashboardClient(cloud.origin, tls.ca);
  await stranger.open();
  await stranger.call('POST', '/signup', { email: 'nosy@bank.example', password: PASSWORD, project: 'nosy-proj' });
  const nosy = await stranger.call('GET', `/audit/lookup?request_id=${requestId}`);
  t.equal(nosy.status, 404, 'another project’s call is not found');
  t.equal((await stranger.call('GET', '/audit/lookup?request_id=nonsense')).status, 400);
  const searches: number[] = [];
  for (let i = 0; i < 11; i++) searches.push((await stranger.call('GET', `/audit/lookup?request_id=req_${'0'.repeat(32)}`)).status);
  t.same(searches.slice(0, 9), Array(9).fill(404));
  t.equal(searches[10], 429, 'lookups, which read the log, are rate-limited per account');

  const verifier = await browser.call('GET', '/audit/verify-anchors.mjs');
  t.equal(verifier.status, 200);
  t.match(verifier.headers['content-disposition'], /attachment; filename="verify-anchors.mjs"/);
  t.match(verifier.text, /^#!\/usr\/bin\/env node\n\/\/ verify-anchors\.mjs/);
});

t.test('device posture: no sign-up; the operator’s account comes from `sovereign admin create`', async (t) => {
  const dataDir = join(dir, 'device-data');
  const config = join(dir, 'device.json');
  writeFileSync(config, JSON.stringify({ posture: 'device', dataDir, modelsDir: join(dir, 'no-models') }));
  const none = cli(['admin', 'create', '--email', 'op@bank.example', '--config', config]);
  t.not(none.code, 0, 'no password, no account');
  const short = cli(['admin', 'create', '--email', 'op@bank.example', '--password-stdin', '--config', config], {}, 'short\n');
  t.equal(short.code, 2);
  t.match(short.stderr, /at least 12 characters/);
  const made = cli(
    ['admin', 'create', '--email', 'op@bank.example', '--password-stdin', '--config', config, '--json'],
    {},
    `${PASSWORD}\n`,
  );
  t.equal(made.json.role, 'admin');
  t.match(cli(['admin', 'list', '--config', config]).stdout, /op@bank\.example\s+admin/);

  const device = await startDaemon(t, ['--config', config]);
  const browser = new DashboardClient(device.origin);
  const opened = await browser.open();
  t.equal(opened.json.signup, false);
  t.match(browser.lastSetCookie[0], /SameSite=Strict; Max-Age=\d+$/, 'not Secure on loopback HTTP, where browsers would drop it');
  const signup = await browser.call('POST', '/signup', { email: 'x@bank.example', password: PASSWORD, project: 'x' });
  t.equal(signup.status, 403);
  t.match(signup.json.error.message, /sovereign admin create/);
  const login = await browser.call('POST', '/login', { email: 'OP@bank.example', password: PASSWORD });
  t.equal(login.status, 200);
  t.equal(login.json.user.role, 'admin');
  t.match(
    browser.lastSetCookie.find((c) => c.startsWith('sov_session=')),
    /HttpOnly$/,
  );
  const project = await browser.call('POST', '/projects', { name: 'ops' });
  t.equal(project.status, 201, 'the administrator manages every project');
  const noProject = await browser.call('POST', '/chat-key');
  t.equal(noProject.status, 400, 'an administrator’s chat app must name the project it calls for');
  t.equal((await browser.call('POST', '/chat-key', { project: 'ops' })).status, 200);
  const rebound = await request(`${device.origin}/dashboard/api/session`, { headers: { host: 'attacker.example' } });
  t.equal(rebound.status, 403, 'on plain HTTP the dashboard answers only to loopback host names (no DNS rebinding)');
  const overview = await browser.call('GET', '/overview');
  t.equal(overview.json.health.posture, 'device');
  t.ok(overview.json.health.egress, 'the egress counter on a sealed posture');

  const anchors = await browser.call('GET', '/audit/anchors.json');
  t.equal(anchors.status, 200, 'an administrator exports the log');
  t.equal(anchors.json.object, 'audit.anchors');
  const entries = await browser.call('GET', `/audit/entries.jsonl?size=${anchors.json.tree_size}`);
  t.equal(entries.status, 200);
  t.equal(
    entries.text === '' ? 0 : entries.text.trimEnd().split('\n').length,
    anchors.json.tree_size,
    'as many entries as the anchors cover',
  );
  t.equal((await browser.call('GET', `/audit/entries.jsonl?size=${anchors.json.tree_size + 1000}`)).status, 400);
});
