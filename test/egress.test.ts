// Sealed postures: every outbound path Node offers, tried from inside the daemon's process, is refused before a
// packet is sent, counted by channel and destination, and reported by /v1/health; the counter survives restarts
// (clean or not); cloud has no egress object. The attempts run in a network namespace with only loopback (unshare
// --net, as root), so that nothing could leave this machine even if the guard failed, and they aim at documentation
// addresses (RFC 5737) and reserved names.
import { spawnSync } from 'node:child_process';
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
