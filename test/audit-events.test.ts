// What the audit log records besides calls (docs/audit.md, "Other entries"): administrative actions made with the
// CLI on the box (through the outbox the daemon drains, also while it runs) and in the dashboard, each naming who
// made it and never a secret; refused sign-ins counted; a boot entry at every start; the served models' digests
// and the models withdrawn. The export holding every kind verifies offline and with openssl.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { AuditLog } from '../daemon/audit/log.js';
import { AuditOutbox, OutboxDrain } from '../daemon/audit/outbox.js';
import { configDigest } from '../daemon/audit/boot.js';
import { entryJson, type EntryFields, type EntryKind } from '../daemon/audit/index.js';
import { loadConfig } from '../daemon/config/index.js';
import { openStore } from '../daemon/store/index.js';
import { makeModelFixtures } from './fixtures/models.js';
import { cli, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';
import { DashboardClient } from './helpers/dashboard.js';

const VERIFIER = join(resolve(import.meta.dirname, '..'), 'tools', 'verify-anchors.mjs');
const PASSWORD = 'a passphrase long enough 42';
const NEW_PASSWORD = 'another passphrase, longer 43';
const ME = { cli: userInfo().username };

type Entry = Record<string, any> & { kind?: string };

function exportLog(dataDir: string, out: string): Entry[] {
  const r = cli(['audit', 'export', '--data-dir', dataDir, '--out', out]);
  if (r.code !== 0) throw new Error(r.stderr);
  const text = readFileSync(join(out, 'entries.jsonl'), 'utf8');
  return text
    ? text
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as Entry)
    : [];
}

/** Polls exports until `ready` holds for the entries (the daemon drains the outbox every second). */
async function exportUntil(dataDir: string, out: string, ready: (entries: Entry[]) => boolean): Promise<Entry[]> {
  for (const until = Date.now() + 15_000; ;) {
    const entries = exportLog(dataDir, out);
    if (ready(entries)) return entries;
    if (Date.now() > until) throw new Error(`the export never got there: ${JSON.stringify(entries.map((e) => e.kind))}`);
    await new Promise((r) => setTimeout(r, 300));
  }
}

const ofKind = (entries: Entry[], kind: string) => entries.filter((e) => e.kind === kind);

/** Every file of an export, as text: no secret may appear in any of them, in clear or hashed. */
function checkNoSecrets(t: Test, dir: string, secrets: string[]): void {
  const text = readdirSync(dir)
    .map((f) => readFileSync(join(dir, f), 'utf8'))
    .join('\n');
  for (const secret of secrets) {
    const forms = [secret, createHash('sha256').update(secret).digest('hex'), createHash('sha256').update(secret).digest('base64')];
    t.notOk(
      forms.some((f) => text.includes(f)),
      `no secret (${secret.slice(0, 10)}…) in the export, in clear or hashed`,
    );
  }
  t.notMatch(text, /sk-sov-/, 'no key secret, whole or in part (a hint)');
  const fields = readFileSync(join(dir, 'entries.jsonl'), 'utf8');
  t.notMatch(fields, /"(passwordHash|password|hint|hash|secret)":/, 'no secret-bearing field in any entry');
}

function verifyOffline(t: Test, dir: string): void {
  const r = spawnSync(process.execPath, [VERIFIER, '--key', join(dir, 'public-key.pem'), '--export', dir], { encoding: 'utf8', env: {} });
  t.equal(r.status, 0, r.stdout + r.stderr);
  t.match(r.stdout, /entries: every checkpoint's root recomputed/);
  t.notMatch(r.stdout, /NOT VERIFIED/, 'every entry is covered by a checkpoint');
  // openssl alone checks the newest checkpoint's signature.
  const anchors = JSON.parse(readFileSync(join(dir, 'anchors.json'), 'utf8'));
  const note: string = anchors.checkpoints.at(-1).note;
  writeFileSync(join(dir, 'note.txt'), note.slice(0, note.indexOf('\n\n') + 1));
  writeFileSync(join(dir, 'sig.der'), Buffer.from(note.trimEnd().split(' ').at(-1)!, 'base64').subarray(4));
  const openssl = spawnSync(
    'openssl',
    ['dgst', '-sha256', '-verify', join(dir, 'public-key.pem'), '-signature', join(dir, 'sig.der'), join(dir, 'note.txt')],
    { encoding: 'utf8' },
  );
  t.match(openssl.stdout, /Verified OK/, openssl.stderr);
}

t.test('the configuration digest leaves out secrets and follows every other value', async (t) => {
  // The configuration's secrets are files (the Redis password here): the digest names them, never reads them.
  const dir = tempDir(t);
  const passwordFile = join(dir, 'redis-password');
  const load = (changes: { url?: string; region?: string; passwordFile?: string } = {}) => {
    const file = join(dir, 'config.json');
    const redis = { url: changes.url ?? 'redis://10.0.0.9:6379/0', passwordFile: changes.passwordFile ?? passwordFile };
    writeFileSync(
      file,
      JSON.stringify({
        posture: 'cloud',
        listen: { host: '127.0.0.1', port: 8443 },
        tls: { cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') },
        region: changes.region ?? 'sa-riyadh-1',
        dataDir: dir,
        limits: { store: 'redis', redis },
      }),
    );
    return loadConfig({ config: file }, {}).config;
  };
  writeFileSync(passwordFile, 'first-secret');
  const one = configDigest(load());
  t.match(one, /^[0-9a-f]{64}$/);
  writeFileSync(passwordFile, 'second-secret');
  t.equal(configDigest(load()), one, 'a changed password: the same digest');
  t.not(configDigest(load({ url: 'redis://10.0.0.10:6379/0' })), one, 'another host: another digest');
  t.not(configDigest(load({ region: 'sa-jeddah-1' })), one, 'another region: another digest');
  t.not(configDigest(load({ passwordFile: join(dir, 'elsewhere') })), one, 'another password file: another digest');
});

t.test('an event logged before a crash is not logged again from the outbox', async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  t.teardown(() => store.close());
  const log = AuditLog.open(store, { journalDir: dir });
  const outbox = new AuditOutbox(store);
  outbox.put('project.created', { by: ME, project: 'proj_a', name: 'a' });
  outbox.put('project.created', { by: ME, project: 'proj_b', name: 'b' });
  const append = (kind: EntryKind, fields: EntryFields) => log.appendCanonical(entryJson(kind, fields, 'T', 'r'));
  // The crash: the first event was taken (marked) and logged, but not deleted.
  const [first] = outbox.pending();
  const event = first.event!;
  outbox.mark(first.key, { ...event, from: log.readable });
  await append('project.created', { ...event.fields, at: event.at, event: event.id });
  const drain = new OutboxDrain(store, log, append, { warn: () => {}, error: () => {} });
  t.equal(await drain.drain(), 1, 'only the event not yet logged is appended');
  t.same(outbox.pending(), [], 'and the outbox is empty');
  await log.settled();
  const events = Array.from({ length: log.size }, (_, i) => JSON.parse(log.entry(i)!.toString()).event as string);
  t.same(events.sort(), [...new Set(events)].sort(), 'each event once');
  t.equal(events.length, 2, 'two events, two entries');
  await log.close();
});

t.test('actions through the CLI and the dashboard, boots and models: one export holds every kind, and verifies', async (t) => {
  const dir = tempDir(t);
  const dataDir = join(dir, 'data');
  const fixtures = makeModelFixtures(dir);
  const config = join(dir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({
      region: 'sa-riyadh-1',
      dataDir,
      manifest: fixtures.manifest,
      modelsDir: fixtures.modelsDir,
      models: { load: 'boot' },
      audit: { checkpointMs: 250 },
      plans: { gold: { rpm: 100, tpm: 10000 } },
    }),
  );
  const run = (args: string[], input?: string) => {
    const r = cli([...args, '--config', config, '--json'], {}, input);
    if (r.code !== 0) throw new Error(`${args.join(' ')}: ${r.stderr}`);
    return r.json;
  };
  const secrets: string[] = [PASSWORD, NEW_PASSWORD];

  // Before the daemon first runs: the outbox keeps the events for it.
  const project = run(['projects', 'create', 'acme']);
  const key = run(['keys', 'create', '--project', 'acme', '--name', 'ci']);
  secrets.push(key.secret);
  run(['keys', 'limits', key.id, '--rpm', '50']);
  run(['keys', 'plan', key.id, 'gold']);
  secrets.push(run(['keys', 'rotate', key.id, '--grace', '60']).secret);
  run(['projects', 'limits', 'acme', '--tpm', '5000']);
  const admin = run(['admin', 'create', '--email', 'ops@bank.example', '--password-stdin'], `${PASSWORD}\n`);
  const member = run(['admin', 'create', '--email', 'member@bank.example', '--password-stdin'], `${PASSWORD}\n`);
  run(['admin', 'password', '--email', 'member@bank.example', '--password-stdin'], `${NEW_PASSWORD}\n`);
  run(['admin', 'role', '--email', 'member@bank.example', 'member']);
  // A model brought in by hand, under another name (it is found by its checksum).
  const source = join(dir, 'incoming');
  mkdirSync(source);
  copyFileSync(join(fixtures.modelsDir, 'tiny-embed.gguf'), join(source, 'embedder.bin'));
  const imported = run(['models', 'import', join(source, 'embedder.bin')]);

  let d: RunningDaemon = await startDaemon(t, ['--config', config]);
  // While it runs: the CLI's events are drained within a second or so.
  const other = run(['keys', 'create', '--project', 'acme']);
  secrets.push(other.secret);
  run(['keys', 'revoke', other.id]);
  const call = await fetch(`${d.baseURL}/models`, { headers: { authorization: `Bearer ${secrets[3]}` } });
  t.equal(call.status, 200, 'the rotated key calls');
  const out = join(dir, 'export');
  await exportUntil(dataDir, out, (e) => ofKind(e, 'key.revoked').length === 1 && ofKind(e, 'boot.models').length === 1);

  // The dashboard: an administrator's changes, and refused sign-ins counted.
  const browser = new DashboardClient(d.origin);
  await browser.open();
  for (let i = 0; i < 3; i++) {
    const refused = await browser.call('POST', '/login', { email: 'ops@bank.example', password: 'wrong password here' });
    t.equal(refused.status, 401);
  }
  t.equal((await browser.call('POST', '/login', { email: 'nobody@bank.example', password: 'wrong password here' })).status, 401);
  t.equal((await browser.call('POST', '/login', { email: 'ops@bank.example', password: PASSWORD })).status, 200);
  const made = await browser.call('POST', '/projects', { name: 'globex' });
  t.equal(made.status, 201);
  const created = await browser.call('POST', '/keys', { project: 'globex', name: 'web' });
  t.equal(created.status, 201);
  secrets.push(created.json.secret);
  const rotated = await browser.call('POST', `/keys/${created.json.key.id}/rotate`, { graceSeconds: 0 });
  secrets.push(rotated.json.secret);
  t.equal((await browser.call('POST', `/keys/${created.json.key.id}/limits`, { rpm: 10, tpm: null })).status, 200);
  t.equal((await browser.call('POST', `/keys/${created.json.key.id}/revoke`)).status, 200);

  // The audit page's filter, by kind.
  const boots = await browser.call('GET', '/audit/entries?kind=boot');
  t.equal(boots.status, 200);
  t.ok(boots.json.kinds.includes('signin.refused'), 'the kinds are listed for the filter');
  t.same(
    boots.json.entries.map((e: { entry: Entry }) => e.entry.kind),
    ['boot'],
    'only boot entries',
  );
  const keyEntries = await browser.call('GET', '/audit/entries?kind=key.created&limit=1');
  t.equal(keyEntries.json.entries.length, 1);
  t.match(keyEntries.json.entries[0].entry, { kind: 'key.created', key: created.json.key.id, by: { account: admin.id } });
  t.equal((await browser.call('GET', '/audit/entries?kind=nonsense')).status, 400);
  const memberBrowser = new DashboardClient(d.origin);
  await memberBrowser.open();
  t.equal((await memberBrowser.call('POST', '/login', { email: 'member@bank.example', password: NEW_PASSWORD })).status, 200);
  t.equal((await memberBrowser.call('GET', '/audit/entries')).status, 403, 'members do not read the whole log');

  // A clean stop writes the sign-in counts; a kill -9 is reported by the next boot.
  t.equal(await d.stop(), 0);
  d = await startDaemon(t, ['--config', config]);
  d.proc.kill('SIGKILL');
  await d.exited;
  // Another region: another digest, and the log keeps its origin (the export below verifies across the change).
  writeFileSync(config, JSON.stringify({ ...JSON.parse(readFileSync(config, 'utf8')), region: 'sa-jeddah-1' }));
  d = await startDaemon(t, ['--config', config]);
  await exportUntil(dataDir, out, (e) => ofKind(e, 'boot').length === 3 && ofKind(e, 'boot.models').length === 2);
  t.equal(await d.stop(), 0);
  const entries = exportLog(dataDir, out);

  const bootEntries = ofKind(entries, 'boot');
  t.match(bootEntries, [
    { boot: 1, previous_stop: null, posture: 'device', region: 'sa-riyadh-1', signer: { kind: 'software', key_id: /^[0-9a-f]{8}$/ } },
    { boot: 2, previous_stop: 'clean' },
    { boot: 3, previous_stop: 'crash', region: 'sa-jeddah-1' },
  ]);
  const version = JSON.parse(readFileSync(join(resolve(import.meta.dirname, '..'), 'package.json'), 'utf8')).version;
  t.equal(bootEntries[0].version, version, 'the version from package.json');
  t.equal(bootEntries[0].config_sha256, bootEntries[1].config_sha256, 'the same configuration, the same digest');
  t.not(bootEntries[2].config_sha256, bootEntries[1].config_sha256, 'another setting, another digest');
  const firstCall = entries.findIndex((e) => e.kind === 'call');
  t.ok(entries.indexOf(bootEntries[0]) < firstCall, 'the boot entry comes before any call');

  const served = ofKind(entries, 'boot.models')[0];
  const chatSha = createHash('sha256')
    .update(readFileSync(join(fixtures.modelsDir, 'tiny-chat.gguf')))
    .digest('hex');
  t.match(served.models, [
    { model: 'tiny-chat', sha256: chatSha },
    { model: 'tiny-embed', sha256: imported.sha256 },
  ]);
  const withdrawn = ofKind(entries, 'model.withdrawn').filter((e) => e.boot === 1);
  t.match(
    Object.fromEntries(withdrawn.map((e) => [e.model, e.state])),
    { 'tampered-chat': 'checksum_mismatch', 'huge-chat': 'does_not_fit', 'truncated-chat': /\w/, 'broken-chat': 'failed' },
    'each withdrawn model, with why',
  );

  const byCli = (kind: string) => ofKind(entries, kind).filter((e) => e.by?.cli === ME.cli);
  t.match(byCli('project.created'), [{ project: project.id, name: 'acme', event: /^evt_/, at: /^\d{4}-/ }]);
  t.match(byCli('key.created'), [{ key: key.id, project: project.id, name: 'ci' }, { key: other.id }]);
  t.match(byCli('key.limits'), [{ key: key.id, rpm: 50 }]);
  t.match(byCli('key.plan'), [{ key: key.id, plan: 'gold' }]);
  t.match(byCli('key.rotated'), [{ key: key.id, grace_seconds: 60 }]);
  t.match(byCli('key.revoked'), [{ key: other.id }]);
  t.match(byCli('project.limits'), [{ project: project.id, tpm: 5000, rpm: null }]);
  t.match(byCli('account.created'), [
    { account: admin.id, role: 'admin' },
    { account: member.id, role: 'admin' },
  ]);
  t.match(byCli('account.password'), [{ account: member.id }]);
  t.match(byCli('account.role'), [{ account: member.id, role: 'member', was: 'admin' }]);
  t.match(byCli('model.imported'), [{ model: 'tiny-embed', sha256: imported.sha256 }]);
  t.match(ofKind(entries, 'audit.key'), [{ by: 'daemon', signer: 'software', key_id: bootEntries[0].signer.key_id }]);
  const events = entries.filter((e) => e.event).map((e) => e.event);
  t.equal(new Set(events).size, events.length, 'no outbox event is logged twice');

  const byAdmin = (kind: string) => ofKind(entries, kind).filter((e) => e.by?.account === admin.id);
  const globex = made.json.id;
  t.match(byAdmin('project.created'), [{ project: globex, name: 'globex' }]);
  t.match(byAdmin('key.created'), [{ key: created.json.key.id, project: globex, name: 'web' }]);
  t.match(byAdmin('key.rotated'), [{ key: created.json.key.id, grace_seconds: 0 }]);
  t.match(byAdmin('key.limits'), [{ key: created.json.key.id, rpm: 10, tpm: null }]);
  t.match(byAdmin('key.revoked'), [{ key: created.json.key.id }]);

  // Three refusals for one account: the first at once, the other two counted at stop; the unknown email unnamed.
  const refusals = ofKind(entries, 'signin.refused');
  t.match(
    refusals.filter((e) => e.account === admin.id),
    [
      { count: 1, reason: 'password' },
      { count: 2, reason: 'password' },
    ],
  );
  t.match(
    refusals.filter((e) => e.account === null),
    [{ count: 1 }],
  );
  t.notMatch(JSON.stringify(refusals), /@bank\.example/, 'no email in the log');

  const kinds = new Set(entries.map((e) => e.kind));
  for (const kind of ['call', 'boot', 'boot.models', 'model.withdrawn', 'model.imported', 'signin.refused', 'audit.key'])
    t.ok(kinds.has(kind), `the export holds ${kind}`);
  checkNoSecrets(t, out, secrets);
  verifyOffline(t, out);
  t.equal(JSON.parse(readFileSync(join(out, 'anchors.json'), 'utf8')).origin, 'sovereign/sa-riyadh-1', 'the origin the log began with');

  // An audit.origin naming another log is refused, with the origin to keep.
  writeFileSync(
    config,
    JSON.stringify({ ...JSON.parse(readFileSync(config, 'utf8')), audit: { checkpointMs: 250, origin: 'bank/other' } }),
  );
  const refused = cli(['serve', '--config', config]);
  t.equal(refused.code, 1);
  t.match(refused.stderr, /audit\.origin is 'bank\/other', but this audit log's checkpoints are signed under 'sovereign\/sa-riyadh-1'/);
});
