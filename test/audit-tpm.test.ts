// Checkpoints signed by a real TPM: a swtpm started by this test on a free loopback port (the same tpm2-tools
// commands talk to /dev/tpmrm0 on a device). init-tpm provisions the key, the daemon signs with it, and the offline
// script (--require-tpm) and openssl both verify. Without a reachable TPM key the device posture serves degraded and
// the appliance posture refuses to start.
import { spawnSync } from 'node:child_process';
import { writeFileSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import t from 'tap';
import { cli, createKey, startDaemon, tempDir } from './helpers/daemon.js';
import { selfSignedCert } from './helpers/tls.js';
import { startSwtpm } from './helpers/tpm.js';

const VERIFIER = resolve(import.meta.dirname, '..', 'tools', 'verify-anchors.mjs');

t.test('init-tpm, checkpoints signed inside the TPM, verified offline and by openssl', async (t) => {
  const tcti = await startSwtpm(t);
  const dataDir = tempDir(t);
  const env = { SOVEREIGN_AUDIT_SIGNER: 'tpm', SOVEREIGN_AUDIT_TCTI: tcti };
  const init = cli(['audit', 'init-tpm', '--data-dir', dataDir], env);
  t.equal(init.code, 0, init.stderr);
  t.match(init.stdout, /signing key persisted at 0x81000101/);
  t.match(init.stdout, /attestation key persisted at 0x81010002/);
  const akFile = join(dataDir, 'audit-attestation-key.pem');
  const publicKeyFile = join(dataDir, 'audit-public-key.pem');
  const publicKey = readFileSync(publicKeyFile, 'utf8');
  t.match(publicKey, /BEGIN PUBLIC KEY/);
  const again = cli(['audit', 'init-tpm', '--data-dir', dataDir], env);
  t.equal(again.code, 1, 'an existing key is not replaced silently');
  t.match(again.stderr, /already has a key at 0x81000101.*--replace/);

  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ audit: { checkpointMs: 300 } }));
  const { secret } = createKey(dataDir);
  const d = await startDaemon(t, ['--data-dir', dataDir, '--config', join(dataDir, 'config.json')], env);
  for (let i = 0; i < 5; i++) await fetch(`${d.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } });
  let anchors: any;
  for (const until = Date.now() + 15_000; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
    anchors = await (await fetch(`${d.baseURL}/audit/anchors`, { headers: { authorization: `Bearer ${secret}` } })).json();
    if (anchors.checkpoints[0]?.size >= 5) break;
  }
  t.equal(anchors.signer, 'tpm');
  t.equal(anchors.public_key, publicKey, 'the daemon signs with the key init-tpm made');
  t.match(anchors.checkpoints[0].note, /\nsigner tpm\n/);
  t.equal(anchors.attestation_key, readFileSync(akFile, 'utf8'));
  t.match(
    anchors.checkpoints[0].quote,
    { reset_count: Number, restart_count: Number, clock: /^\d+$/ },
    'each checkpoint carries a TPM quote',
  );
  const health = await (await fetch(`${d.baseURL}/health`, { headers: { authorization: `Bearer ${secret}` } })).json();
  t.match(health, { status: 'ok', audit: { signer: 'tpm', problem: null } });

  const work = tempDir(t);
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', work]).code, 0);
  const verify = (dir: string) =>
    spawnSync(process.execPath, [VERIFIER, '--key', publicKeyFile, '--export', dir, '--require-tpm', '--ak', akFile], { encoding: 'utf8' });
  const verified = verify(work);
  t.equal(verified.status, 0, verified.stdout);
  t.match(verified.stdout, /TPM quotes ok: each checkpoint bound to the TPM's clock/);
  t.match(verified.stdout, /VERIFIED/);
  // The key init-tpm provisioned is in the log, by whom, once (the refused second run changed nothing).
  const entries = readFileSync(join(work, 'entries.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as { kind?: string });
  const keys = entries.filter((e) => e.kind === 'audit.key');
  t.match(keys, [{ by: { cli: String }, signer: 'tpm', key_id: /^[0-9a-f]{8}$/, replaced: null }], 'init-tpm is logged once');
  t.equal((keys[0] as { key_id?: string }).key_id, anchors.key_id, 'with the key the checkpoints name');
  // A quote moved to another checkpoint does not fit it.
  const swapped = JSON.parse(readFileSync(join(work, 'anchors.json'), 'utf8'));
  t.ok(swapped.checkpoints.length >= 2, `${swapped.checkpoints.length} checkpoints exported`);
  [swapped.checkpoints[0].quote, swapped.checkpoints[1].quote] = [swapped.checkpoints[1].quote, swapped.checkpoints[0].quote];
  writeFileSync(join(work, 'anchors.json'), JSON.stringify(swapped));
  const moved = verify(work);
  t.equal(moved.status, 1);
  t.match(moved.stdout, /the TPM quote is for another text/);
  const note: string = anchors.checkpoints[0].note;
  writeFileSync(join(work, 'note.txt'), note.slice(0, note.indexOf('\n\n') + 1));
  writeFileSync(join(work, 'sig.der'), Buffer.from(note.trimEnd().split(' ').at(-1)!, 'base64').subarray(4));
  const openssl = spawnSync(
    'openssl',
    ['dgst', '-sha256', '-verify', publicKeyFile, '-signature', join(work, 'sig.der'), join(work, 'note.txt')],
    {
      encoding: 'utf8',
    },
  );
  t.match(openssl.stdout, /Verified OK/, openssl.stderr);
  t.equal(await d.stop(), 0);
});

t.test('no TPM key: the device posture serves and logs, degraded; the appliance posture refuses to start', async (t) => {
  const tcti = await startSwtpm(t); // a TPM with no key provisioned
  const dataDir = tempDir(t);
  const { secret } = createKey(dataDir);
  const env = { SOVEREIGN_AUDIT_SIGNER: 'tpm', SOVEREIGN_AUDIT_TCTI: tcti };
  const d = await startDaemon(t, ['--data-dir', dataDir], env);
  const res = await fetch(`${d.baseURL}/models`, { headers: { authorization: `Bearer ${secret}` } });
  t.match(res.headers.get('x-audit-leaf'), /^\d+$/, 'calls are still logged');
  const health = (await (await fetch(`${d.baseURL}/health`, { headers: { authorization: `Bearer ${secret}` } })).json()) as any;
  t.equal(health.status, 'degraded');
  t.match(health.audit, { signer: null, problem: /no signing key at 0x81000101.*sovereign audit init-tpm/ });
  await d.stop();

  const tls = selfSignedCert(tempDir(t));
  const refused = cli(['serve', '--posture', 'appliance', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir], {
    ...env,
    SOVEREIGN_TLS_CERT: tls.cert,
    SOVEREIGN_TLS_KEY: tls.key,
  });
  t.equal(refused.code, 1);
  t.match(refused.stderr, /audit checkpoints cannot be signed: no signing key/);
});
