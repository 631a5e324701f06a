// A cluster's audit (store: "postgres"; issue 57, "Audit stays per machine"): a real PostgreSQL 15 on loopback and
// two cloud replicas, each with its own log signed by its own software key. Each log has an origin that names its
// replica, and an origin another replica's log already publishes under is refused at start; a call's receipt names
// its log (X-Audit-Log, the receipt's `origin`); each replica publishes its checkpoints, so each lists both logs
// (GET /v1/audit/anchors, `logs`); tools/verify-anchors.mjs checks both exports as one cluster, finds a fork in an
// anchor set where one origin's key signed two different trees of one size, and reports a replica stopped for longer
// than its bound as silent. With PostgreSQL down, a replica's log goes on and its checkpoints are published again
// once it is back.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { noteText, originOf, signedNote, SoftwareSigner } from '../daemon/audit/index.js';
import { loadConfig } from '../daemon/config/index.js';
import { writeReplicaConfig } from './helpers/cluster.js';
import { cli, ROOT, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { startPostgres } from './helpers/postgres.js';
import { selfSignedCert } from './helpers/tls.js';

const VERIFIER = join(ROOT, 'tools', 'verify-anchors.mjs');
const HEARTBEAT_MS = 1_000;
const CHECKPOINT_MS = 200;
/** What a log of these settings is allowed before it is silent: two heartbeats (daemon/audit/anchors.ts). */
const SILENT_AFTER_MS = 2 * (HEARTBEAT_MS + CHECKPOINT_MS);

const root = t;
const dir = tempDir(t);
const tls = selfSignedCert(dir);
const pg = await startPostgres(t);
const postgres = { url: pg.url, passwordFile: pg.passwordFile, timeoutMs: 1000 };

const configFor = (name: string, origin?: string) =>
  writeReplicaConfig(
    dir,
    name,
    { tls, postgres },
    { audit: { checkpointMs: CHECKPOINT_MS, heartbeatMs: HEARTBEAT_MS, ...(origin ? { origin } : {}) } },
  );
// Replica a takes the default origin, which names its host; b, on the same host, must be given its own.
const origins = { a: `sovereign/sa-riyadh-1/${hostname()}`, b: 'sovereign/sa-riyadh-1/b' };
const configs = { a: configFor('a'), b: configFor('b', origins.b), c: configFor('c') };
const replicas = {} as Record<'a' | 'b', RunningDaemon>;
const key = { secret: '' };
const auth = () => ({ authorization: `Bearer ${key.secret}` });
const get = (replica: RunningDaemon, path: string) => request(`${replica.baseURL}${path}`, { headers: auth(), ca: tls.ca });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns something, for up to `ms`. */
async function until<T>(ms: number, check: () => Promise<T | undefined>): Promise<T | undefined> {
  for (const end = Date.now() + ms; ;) {
    const value = await check();
    if (value !== undefined || Date.now() > end) return value;
    await sleep(100);
  }
}

function verifier(args: string[]) {
  const r = spawnSync(process.execPath, [VERIFIER, ...args], { encoding: 'utf8', env: {} });
  return { code: r.status, out: r.stdout + r.stderr };
}

function exportLog(name: 'a' | 'b', as: string): string {
  const out = join(dir, as);
  const r = cli(['audit', 'export', '--out', out, '--config', configs[name]]);
  if (r.code !== 0) throw new Error(r.stderr);
  return out;
}

interface Listed {
  origin: string;
  key_id: string;
  public_key: string;
  silent: boolean;
  published_at: string;
  checkpoint: { seq: number; size: number; root: string; note: string; time: string };
}

t.before(async () => {
  const migrated = cli(['db', 'migrate', '--config', configs.a]);
  if (migrated.code !== 0) throw new Error(migrated.stderr);
  cli(['projects', 'create', 'ministry', '--config', configs.a]);
  const made = cli(['keys', 'create', '--project', 'ministry', '--config', configs.a, '--json']);
  if (made.code !== 0) throw new Error(made.stderr);
  key.secret = made.json.secret;
  replicas.a = await startDaemon(root, ['--config', configs.a]);
  replicas.b = await startDaemon(root, ['--config', configs.b]);
});

t.test('the default origin names the region, and in a cluster the host as well', async (t) => {
  const { config } = loadConfig({}, { HOME: dir, SOVEREIGN_REGION: 'sa-jeddah-2' });
  t.equal(originOf(config, 'node-7'), 'sovereign/sa-jeddah-2', 'one machine: its region');
  const cluster = { ...config, store: 'postgres' as const };
  t.equal(originOf(cluster, 'node-7.riyadh'), 'sovereign/sa-jeddah-2/node-7.riyadh');
  t.equal(originOf(cluster, 'عقدة 7'), 'sovereign/sa-jeddah-2/-----7', 'an origin is printable ASCII without spaces');
  t.equal(originOf({ ...cluster, audit: { ...config.audit, origin: 'acme/node-a' } }, 'node-7'), 'acme/node-a', 'audit.origin wins');
});

t.test('each replica keeps its own log, under an origin that names it and signed by its own key', async (t) => {
  const [a, b] = [await get(replicas.a, '/audit/anchors'), await get(replicas.b, '/audit/anchors')];
  t.equal(a.json.origin, origins.a, 'the default origin names the region and the host');
  t.equal(b.json.origin, origins.b, 'audit.origin still names it');
  t.not(a.json.key_id, b.json.key_id, 'two keys');
  for (const replica of [a, b]) t.match(replica.json.checkpoints[0].note, new RegExp(`^${replica.json.origin}\n`));

  // Both logs in each replica's list, as soon as each has published its first checkpoint.
  for (const replica of [replicas.a, replicas.b]) {
    const logs = await until(5_000, async () => {
      const listed = (await get(replica, '/audit/anchors')).json.logs as Listed[];
      return listed.length === 2 ? listed : undefined;
    });
    const expected = [a.json, b.json].map((log) => ({ origin: log.origin, key_id: log.key_id, public_key: log.public_key, silent: false }));
    t.same(
      logs?.map(({ origin, key_id, public_key, silent }) => ({ origin, key_id, public_key, silent })),
      expected.sort((x, y) => (x.origin < y.origin ? -1 : 1)),
      'every replica lists every log, with its key',
    );
    for (const log of logs ?? []) t.match(log.checkpoint.note, new RegExp(`^${log.origin}\n`));
  }
  const health = await get(replicas.a, '/health');
  t.match(health.json.audit, { problem: null, anchors: { published_at: String, problem: null } });
});

t.test('a replica whose origin another log already publishes under is refused at start', async (t) => {
  // c: a new data directory on the same host, so the same default origin as a, and a key of its own.
  const refused = await startDaemon(t, ['--config', configs.c]).then(
    () => null,
    (err: Error) => err.message,
  );
  t.match(refused, `the audit origin '${origins.a}' is taken: another replica's log publishes its checkpoints under it`);
  t.match(refused, /set a distinct audit\.origin on this replica/);
});

t.test("a call's receipt names its log: X-Audit-Log, and the receipt's origin", async (t) => {
  for (const name of ['a', 'b'] as const) {
    const call = await get(replicas[name], '/models');
    t.equal(call.status, 200);
    t.equal(call.headers['x-audit-log'], origins[name], `replica ${name}'s log`);
    const leaf = Number(call.headers['x-audit-leaf']);
    const receipt = await until(5_000, async () => {
      const r = await get(replicas[name], `/audit/anchors?leaf=${leaf}`);
      return r.status === 200 ? r.json : undefined;
    });
    t.match(receipt, { object: 'audit.receipt', origin: origins[name], leaf });
    t.match(receipt.checkpoint.note, new RegExp(`^${origins[name]}\n`));
  }
});

const exports = { a: '', b: '', keyA: '', keyB: '' };

t.test("verify-anchors checks both replicas' exports as one cluster", async (t) => {
  exports.a = exportLog('a', 'export-a');
  exports.b = exportLog('b', 'export-b');
  exports.keyA = join(exports.a, 'public-key.pem');
  exports.keyB = join(exports.b, 'public-key.pem');
  const logs = JSON.parse(readFileSync(join(exports.a, 'logs.json'), 'utf8')) as { logs: Listed[] };
  t.same(logs.logs.map((l) => l.origin).sort(), [origins.a, origins.b].sort(), "logs.json: every replica's log");

  const r = verifier(['--key', exports.keyA, '--key', exports.keyB, '--export', exports.a, '--export', exports.b]);
  t.equal(r.code, 0, 'verified', { out: r.out });
  t.match(r.out, `log ${origins.a} (export ${exports.a}):`);
  t.match(r.out, `log ${origins.b} (export ${exports.b}):`);
  t.match(r.out, /ok: each of the 2 keys signs one log/);
  t.match(r.out, new RegExp(`ok: log ${origins.b}: \\d+ checkpoints from \\d source\\(s\\) agree with its entries`));
  t.match(r.out, /\nVERIFIED\n$/);

  // Each log with its own key only: one key cannot vouch for the other replica's log.
  const oneKey = verifier(['--key', exports.keyA, '--export', exports.a, '--export', exports.b]);
  t.equal(oneKey.code, 1);
  t.match(oneKey.out, `FAILED: log ${origins.b} (export ${exports.b}): the log is signed now by key`);
});

t.test("an anchor set in which one origin's key signed two trees of one size is flagged as a fork", async (t) => {
  // What a replica that shows different logs to different readers leaves: its own key's signature on another tree
  // of a size it also signed (made here with a's software key, as a compromised a could).
  const anchorsA = JSON.parse(readFileSync(join(exports.a, 'anchors.json'), 'utf8')) as {
    checkpoints: Array<{ seq: number; size: number; key_id: string }>;
  };
  const real = anchorsA.checkpoints.at(-1)!;
  const signer = new SoftwareSigner(join(dir, 'a', 'audit-signing-key.pem'));
  const text = noteText(origins.a, real.size, randomBytes(32), new Date(), 'software');
  const note = signedNote(text, origins.a, signer.keyId, await signer.sign(Buffer.from(text)));
  const forged = join(dir, 'export-b-forked');
  cpSync(exports.b, forged, { recursive: true });
  const logsFile = join(forged, 'logs.json');
  const logs = JSON.parse(readFileSync(logsFile, 'utf8')) as { logs: Listed[] };
  const recordA = logs.logs.find((l) => l.origin === origins.a)!;
  recordA.checkpoint = { ...recordA.checkpoint, seq: real.seq, size: real.size, root: text.split('\n')[2], note };
  writeFileSync(logsFile, JSON.stringify(logs));

  const r = verifier(['--key', exports.keyA, '--key', exports.keyB, '--export', exports.a, '--export', forged]);
  t.equal(r.code, 1, 'failed', { out: r.out });
  t.match(r.out, `FORK: log ${origins.a}: two signed checkpoints of size ${real.size} with different roots`);
  t.match(r.out, `FORK: log ${origins.a}: checkpoint ${real.seq} (size ${real.size}, as published, in export ${forged}) is not the tree`);
  t.match(r.out, /\nFAILED: 2 forks\n$/);
});

t.test('a replica stopped for longer than its bound is reported silent', async (t) => {
  await replicas.b.stop();
  const stoppedAt = Date.now();
  // Its last checkpoint, signed as it stopped, was published; then nothing.
  const listed = await until(SILENT_AFTER_MS + 5_000, async () => {
    const logs = (await get(replicas.a, '/audit/anchors')).json.logs as Listed[];
    return logs.find((l) => l.origin === origins.b)?.silent ? logs : undefined;
  });
  t.ok(listed, "b is listed silent by a's GET /v1/audit/anchors");
  t.ok(Date.now() - stoppedAt >= SILENT_AFTER_MS - 500, 'not before its bound');
  t.equal(listed?.find((l) => l.origin === origins.a)?.silent, false, 'a, which goes on, is not');

  const exportA = exportLog('a', 'export-a-later');
  const exportB = exportLog('b', 'export-b-stopped');
  const args = ['--key', exports.keyA, '--key', exports.keyB, '--export', exportA, '--export', exportB];
  const r = verifier(args);
  t.equal(r.code, 3, 'exit 3: verified, a log silent', { out: r.out });
  t.match(
    r.out,
    new RegExp(
      `SILENT: log ${origins.b}: its newest checkpoint \\(signed [^)]+\\) is [0-9.]+ s older than the newest in the set, more than its bound of 2\\.4 s`,
    ),
  );
  t.notMatch(r.out, /FORK|FAILED/);
  t.match(r.out, /\nVERIFIED, but 1 log silent\n$/);
  t.equal(verifier([...args, '--silent-ok']).code, 0, '--silent-ok: silence is reported, not failed');
});

t.test('with PostgreSQL down the log goes on, and its checkpoints are published again once it is back', async (t) => {
  /** The checkpoints a's log holds, as an export (which needs no PostgreSQL for this machine's own log) counts them. */
  const signed = () => {
    const r = cli(['audit', 'export', '--out', join(dir, `probe-${Date.now()}`), '--config', configs.a, '--json']);
    return r.code === 0 ? (r.json as { checkpoints: number }).checkpoints : NaN;
  };
  const logLines = () => replicas.a.logs.join('\n');
  await pg.stop();
  const failed = await until(10_000, async () => (/could not be published to the shared database/.test(logLines()) ? true : undefined));
  t.ok(failed, 'a failed publication is noted');
  const signedDuring = signed();
  await sleep(HEARTBEAT_MS + CHECKPOINT_MS * 2);
  t.ok(signed() > signedDuring, 'checkpoints are still signed meanwhile');
  await pg.start();
  const again = await until(15_000, async () => (/audit checkpoints are published again/.test(logLines()) ? true : undefined));
  t.ok(again, 'published again once PostgreSQL is back');
  const health = await until(5_000, async () => {
    const r = await get(replicas.a, '/health');
    return r.status === 200 ? r.json : undefined;
  });
  t.match(health?.audit?.anchors, { published_at: String, problem: null });
});
