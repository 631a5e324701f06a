// Sealed postures: every outbound path Node offers, tried from inside the daemon's process, is refused before a
// packet is sent, counted by channel and destination, and reported by /v1/health; the counter survives restarts
// (clean or not); cloud has no egress object. The attempts run in a network namespace with only loopback (unshare
// --net, as root), so that nothing could leave this machine even if the guard failed, and they aim at documentation
// addresses (RFC 5737) and reserved names.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { cli, createKey, ROOT, startDaemon, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const PROBE = join(ROOT, 'test', 'fixtures', 'egress-probe.ts');
// The probe is TypeScript, run the way the benchmarks are.
const LOADER = join(ROOT, 'node_modules', '@tapjs', 'typescript', 'dist', 'esm', 'import.mjs');

interface ProbeOutput {
  results: Record<string, string>;
  refusable: string[];
  allowed: string[];
  health: any;
}

/** Runs the probe in a fresh network namespace with loopback only. */
function probeInNamespace(env: NodeJS.ProcessEnv): ProbeOutput {
  const r = spawnSync(
    'unshare',
    ['--net', '--', 'sh', '-c', 'ip link set lo up && exec "$0" --import "$1" "$2"', process.execPath, LOADER, PROBE],
    {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: process.env.HOME, TS_NODE_TRANSPILE_ONLY: '1', SOVEREIGN_AUDIT_SIGNER: 'software', ...env },
      timeout: 120_000,
    },
  );
  if (r.status !== 0) throw new Error(`the probe failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as ProbeOutput;
}

const canUnshare = spawnSync('unshare', ['--net', 'true']).status === 0;

/**
 * Runs the internal-upstream fixture in a fresh network namespace whose loopback interface also holds two
 * internal-network addresses (10.77.0.5 for the rack, 10.77.0.6 for a server no upstream names).
 */
function internalUpstreamInNamespace(env: NodeJS.ProcessEnv): any {
  const setup = 'ip link set lo up && ip addr add 10.77.0.5/32 dev lo && ip addr add 10.77.0.6/32 dev lo';
  const r = spawnSync(
    'unshare',
    [
      '--net',
      '--',
      'sh',
      '-c',
      `${setup} && exec "$0" --import "$1" "$2"`,
      process.execPath,
      LOADER,
      join(ROOT, 'test', 'fixtures', 'internal-upstream.ts'),
    ],
    {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: process.env.HOME, TS_NODE_TRANSPILE_ONLY: '1', SOVEREIGN_AUDIT_SIGNER: 'software', ...env },
      timeout: 120_000,
    },
  );
  if (r.status !== 0) throw new Error(`the fixture failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
}

t.test(
  'device: every outbound path is refused and counted; loopback and the daemon’s own tools are not',
  { skip: !canUnshare && 'needs root for unshare --net' },
  async (t) => {
    const dataDir = tempDir(t);
    const key = createKey(dataDir);
    const first = probeInNamespace({ SOVEREIGN_DATA_DIR: dataDir, PROBE_KEY: key.secret });
    for (const name of first.refusable) t.equal(first.results[name], 'EGRESS_REFUSED', `${name}: refused by the guard`);
    t.equal(first.results['net.connect to the daemon over loopback'], 'connected', 'loopback is allowed');
    t.equal(first.results['dns.lookup of localhost'], 'answered', 'localhost resolves');
    t.equal(first.results['an allowed program (ffmpeg)'], 'ran', 'the daemon’s own tools run');

    const egress = first.health.egress;
    t.equal(egress.guard, 'on');
    t.equal(egress.refused_since_boot, first.refusable.length, 'each refused attempt counted once');
    t.equal(egress.refused_since_first_boot, first.refusable.length);
    t.same(egress.by_channel, { tcp: 7, udp: 4, dns: 5, process: 3 }, 'by channel');
    t.same(egress.by_destination, { public: 8, private: 1, hostname: 5, multicast: 2, program: 3 }, 'by destination');
    t.match(egress.last_refused_at, /^\d{4}-\d\d-\d\dT/);
    t.equal(egress.kernel, null, 'not run by systemd: no kernel accounting');
    t.match(first.health.service, { boots: 1, crashes: 0, previous_stop: null, systemd: null });

    // A clean restart: the count since first boot stays, the count since boot starts again.
    const second = probeInNamespace({ SOVEREIGN_DATA_DIR: dataDir, PROBE_KEY: key.secret, PROBE_ATTEMPTS: 'none' });
    t.equal(second.health.egress.refused_since_first_boot, first.refusable.length, 'the counter survives a restart');
    t.equal(second.health.egress.refused_since_boot, 0);
    t.match(second.health.service, { boots: 2, crashes: 0, previous_stop: 'clean' });

    // A crash: the daemon is killed; the next one reports it, and the counter and the audit log are intact.
    const killed = await startDaemon(t, ['--data-dir', dataDir]);
    const call = await request(`${killed.baseURL}/models`, { headers: { authorization: `Bearer ${key.secret}` } });
    t.equal(call.status, 200);
    killed.proc.kill('SIGKILL');
    await killed.exited;
    const after = await startDaemon(t, ['--data-dir', dataDir]);
    const health = (await request(`${after.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` } })).json;
    t.match(health.service, { boots: 4, crashes: 1, previous_stop: 'crash' }, 'the restart after a crash is reported');
    t.equal(health.egress.refused_since_first_boot, first.refusable.length, 'the counter survives a crash');
    await after.stop();
    const verified = cli(['audit', 'verify', '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software' });
    t.equal(verified.code, 0, verified.stdout + verified.stderr);
    t.match(verified.stdout, /VERIFIED/, 'the audit log verifies after the crash');

    // The log counts the refusals per boot and destination kind: the first of each kind at once, the rest at stop.
    const exported = tempDir(t);
    t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', exported]).code, 0);
    const refusals = readFileSync(join(exported, 'entries.jsonl'), 'utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((e) => e.kind === 'egress.refused');
    t.ok(
      refusals.every((e) => e.boot === 1),
      'all in the first boot',
    );
    const counted: Record<string, number> = {};
    for (const e of refusals) counted[e.destination] = (counted[e.destination] ?? 0) + e.count;
    t.same(counted, egress.by_destination, 'every refusal counted, by destination kind');
    const expected = Object.values(counted).reduce((n, total) => n + (total > 1 ? 2 : 1), 0);
    t.equal(refusals.length, expected, 'one entry for the first of each kind, one for the count of the rest');
  },
);

t.test('appliance has the egress object; cloud has none', { skip: !canUnshare && 'needs root for unshare --net' }, async (t) => {
  const dataDir = tempDir(t);
  const key = createKey(dataDir);
  const tls = selfSignedCert(dataDir);
  const tlsEnv = { SOVEREIGN_TLS_CERT: tls.cert, SOVEREIGN_TLS_KEY: tls.key };
  const appliance = probeInNamespace({
    SOVEREIGN_DATA_DIR: dataDir,
    SOVEREIGN_POSTURE: 'appliance',
    SOVEREIGN_HOST: '127.0.0.1',
    NODE_EXTRA_CA_CERTS: join(dataDir, 'cert.pem'),
    PROBE_KEY: key.secret,
    ...tlsEnv,
  });
  t.equal(appliance.results['net.connect to a public address'], 'EGRESS_REFUSED', 'appliance refuses');
  t.equal(appliance.health.egress.refused_since_boot, appliance.refusable.length);

  const cloud = await startDaemon(t, ['--posture', 'cloud', '--host', '127.0.0.1', '--data-dir', dataDir], tlsEnv);
  const res = await request(`${cloud.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` }, ca: tls.ca });
  const health = res.json;
  t.equal(health.posture, 'cloud');
  t.notOk('egress' in health, 'no egress object on cloud');
  await cloud.stop();
});

t.test(
  'appliance: an upstream at an internal-network address is reached through the guard; any other internal address is not',
  { skip: !canUnshare && 'needs root for unshare --net' },
  async (t) => {
    const dataDir = tempDir(t);
    const key = createKey(dataDir);
    const tls = selfSignedCert(dataDir);
    const config = join(dataDir, 'config.json');
    writeFileSync(
      config,
      JSON.stringify({
        posture: 'appliance',
        listen: { host: '127.0.0.1', port: 18443 },
        tls: { cert: tls.cert, key: tls.key },
        dataDir,
        upstreams: [
          {
            name: 'rack',
            baseUrl: 'http://10.77.0.5:18080/v1',
            healthIntervalMs: 200,
            models: [{ id: 'rack-chat', upstreamModel: 'rack-model', capability: 'chat' }],
          },
        ],
      }),
    );
    const out = internalUpstreamInNamespace({
      SOVEREIGN_CONFIG: config,
      NODE_EXTRA_CA_CERTS: join(dataDir, 'cert.pem'),
      PROBE_KEY: key.secret,
    });
    t.ok(out.listed.includes('rack-chat'), 'the rack’s model is listed: its health check went through the guard');
    t.equal(out.status, 200);
    t.equal(out.answer, 'from the rack', 'a chat call reached the rack');
    t.equal(out.other, 'EGRESS_REFUSED', 'another internal address, not an upstream, is refused');
    t.equal(out.health.egress.refused_since_boot, 1, 'and counted');
    t.same(out.health.egress.by_destination, { private: 1 });
  },
);

t.test('config: sealed postures take upstreams on loopback or internal-network addresses, never public ones or names', async (t) => {
  const dir = tempDir(t);
  const tls = selfSignedCert(dir);
  const check = (baseUrl: string, posture: 'device' | 'appliance') => {
    const file = join(dir, `check-${posture}-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(
      file,
      JSON.stringify({
        posture,
        ...(posture === 'appliance' ? { listen: { host: '127.0.0.1' }, tls: { cert: tls.cert, key: tls.key } } : {}),
        upstreams: [{ name: 'a', baseUrl, models: [{ id: 'm', capability: 'chat' }] }],
      }),
    );
    return cli(['config', 'check', '--config', file]);
  };
  for (const posture of ['device', 'appliance'] as const) {
    for (const ok of ['http://10.0.0.5:8000/v1', 'http://192.168.1.20:8000/v1', 'http://172.20.0.2/v1', 'http://[fd00::5]:8000/v1']) {
      t.equal(check(ok, posture).code, 0, `${posture}: ${ok}`);
    }
    for (const refused of ['http://8.8.8.8/v1', 'http://rack.internal:8000/v1', 'http://169.254.169.254/v1']) {
      const r = check(refused, posture);
      t.equal(r.code, 1, `${posture}: ${refused} refused`);
      t.match(r.stdout + r.stderr, /the \w+ posture is sealed: an upstream must be on loopback .* or at an internal-network IP address/);
    }
  }
});
