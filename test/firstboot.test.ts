// First boot, with a temporary directory standing in for the data partition and a swtpm for the device's TPM: the
// data partition's filesystem is made once and never again, the audit key is created in the TPM, models come in
// from a signed bundle and from loose pinned files, the appliance's certificate is made, and the fingerprints the
// installer records are printed. A second boot finds everything done and changes nothing.
import { spawnSync } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import { mkdirSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import t from 'tap';
import { manifestEntry, standInModel } from './fixtures/manifest-entry.js';
import { cli, tempDir } from './helpers/daemon.js';
import { startSwtpm } from './helpers/tpm.js';

const DATA_PARTITION = resolve(import.meta.dirname, '..', 'image-build', 'rootfs', 'usr', 'lib', 'sovereign', 'data-partition');

t.test('the data partition gets a filesystem only when it has none', async (t) => {
  const dir = tempDir(t);
  const device = join(dir, 'data.img');
  writeFileSync(device, '');
  truncateSync(device, 32 * 1024 * 1024);
  const probe = () => spawnSync('blkid', ['-p', '-o', 'export', device], { encoding: 'utf8' }).stdout;
  const first = spawnSync(DATA_PARTITION, [device], { encoding: 'utf8' });
  t.equal(first.status, 0, first.stderr);
  t.match(first.stdout, /is empty: making an ext4 filesystem labelled sovereign-data/);
  const made = probe();
  t.match(made, /TYPE=ext4/);
  t.match(made, /LABEL=sovereign-data/);
  const second = spawnSync(DATA_PARTITION, [device], { encoding: 'utf8' });
  t.equal(second.status, 0);
  t.match(second.stdout, /already holds ext4: left as it is/);
  t.equal(probe(), made, 'the same filesystem (same UUID): nothing was reformatted');

  const other = join(dir, 'other.img');
  writeFileSync(other, '');
  truncateSync(other, 8 * 1024 * 1024);
  spawnSync('mkswap', [other]);
  const foreign = spawnSync(DATA_PARTITION, [other], { encoding: 'utf8' });
  t.match(foreign.stdout, /already holds swap: left as it is/, 'anything else on it is left alone too');
  const missing = spawnSync(DATA_PARTITION, [join(dir, 'nothing')], { encoding: 'utf8' });
  t.equal(missing.status, 1);
  t.match(missing.stderr, /not found/);
});

t.test('first boot on an appliance: TPM key, models, certificate, fingerprints; the second boot changes nothing', async (t) => {
  const tcti = await startSwtpm(t);
  const dir = tempDir(t);
  const data = join(dir, 'var-lib-sovereign');
  const weights = standInModel(4);
  const loose = standInModel(5);
  const entry = manifestEntry;
  const manifest = join(dir, 'manifest.json');
  writeFileSync(
    manifest,
    JSON.stringify({
      models: [
        entry('bundled-chat', 'bundled.gguf', null),
        entry('loose-chat', 'loose.gguf', loose),
        entry('open-chat', 'open.gguf', null),
      ],
    }),
  );

  // The installer's USB disk: a bundle made on a staging machine, and a loose file whose checksum the manifest pins.
  const staging = join(dir, 'staging');
  mkdirSync(join(staging, 'models'), { recursive: true });
  writeFileSync(join(staging, 'models', 'bundled.gguf'), weights);
  const key = join(dir, 'ops');
  t.equal(cli(['models', 'bundle-key', '--out', key]).code, 0);
  const media = join(dir, 'run-sovereign-media');
  const usb = join(media, 'SOVEREIGN-MODELS');
  const bundled = cli([
    'models',
    'bundle',
    '--out',
    join(usb, 'november'),
    '--key',
    `${key}.key`,
    '--data-dir',
    staging,
    '--models-dir',
    join(staging, 'models'),
    '--manifest',
    manifest,
  ]);
  t.equal(bundled.code, 0, bundled.stderr);
  const partition = join(media, 'sovereign-models');
  mkdirSync(partition, { recursive: true });
  writeFileSync(join(partition, 'loose.gguf'), loose);

  const config = join(dir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({
      posture: 'appliance',
      listen: { host: '127.0.0.1', port: 8443 },
      tls: { cert: join(data, 'tls', 'cert.pem'), key: join(data, 'tls', 'key.pem') },
      dataDir: data,
      manifest,
      models: { bundleKeys: [`${key}.pub`] },
      audit: { signer: 'tpm', tcti },
    }),
  );
  const args = [
    'firstboot',
    '--config',
    config,
    '--source',
    usb,
    '--source',
    partition,
    '--tls-name',
    'sov-01.bank.internal',
    '--tls-name',
    '10.20.0.7',
  ];

  const first = cli(args);
  t.equal(first.code, 0, first.stdout + first.stderr);
  t.match(first.stdout, /audit-key +signing key created in the TPM at 0x81000101/);
  t.match(first.stdout, /models +bundled-chat \(imported from .*november\); loose-chat \(imported from .*sovereign-models\)/);
  t.match(first.stdout, /tls +self-signed certificate made for sov-01.bank.internal, 10.20.0.7/);
  const publicKey = readFileSync(join(data, 'audit-public-key.pem'), 'utf8');
  const printed = /audit public key +(SHA256:[0-9a-f:]+)/.exec(first.stdout)?.[1];
  const spki = createHash('sha256')
    .update(Buffer.from(publicKey.replace(/-----[A-Z ]+-----|\s/g, ''), 'base64'))
    .digest('hex');
  t.equal(printed?.replaceAll(':', '').replace('SHA256', ''), spki, "the fingerprint printed is the SHA-256 of the key's SPKI");
  t.ok(first.stdout.includes(publicKey.trim()), 'and the public key itself is printed for the installer');
  t.ok(readFileSync(join(data, 'models', 'bundled.gguf')).equals(weights));
  t.ok(readFileSync(join(data, 'models', 'loose.gguf')).equals(loose));

  const cert = new X509Certificate(readFileSync(join(data, 'tls', 'cert.pem')));
  t.match(cert.subjectAltName, /DNS:sov-01.bank.internal/);
  t.match(cert.subjectAltName, /IP Address:10.20.0.7/);
  t.equal(statSync(join(data, 'tls', 'key.pem')).mode & 0o777, 0o600, 'the private key is 0600');
  t.ok(cert.checkPrivateKey(await import('node:crypto').then((c) => c.createPrivateKey(readFileSync(join(data, 'tls', 'key.pem'))))));
  t.match(first.stdout, new RegExp(`TLS certificate +SHA256:${cert.fingerprint256.toLowerCase()}`));

  const report = JSON.parse(readFileSync(join(data, 'firstboot.json'), 'utf8'));
  t.equal(report.ok, true);
  t.same(
    report.steps.map((s: { step: string; outcome: string }) => [s.step, s.outcome]),
    [
      ['state', 'done'],
      ['audit-key', 'done'],
      ['models', 'done'],
      ['tls', 'done'],
    ],
  );

  // The daemon serves with what first boot made: the key in the TPM signs, the certificate is the one served.
  const check = cli(['config', 'check', '--config', config, '--json']);
  t.equal(check.code, 0, check.stderr);

  const second = cli(args);
  t.equal(second.code, 0, second.stderr);
  const again = JSON.parse(readFileSync(join(data, 'firstboot.json'), 'utf8'));
  t.same(
    again.steps.map((s: { outcome: string }) => s.outcome),
    ['skipped', 'skipped', 'skipped', 'skipped'],
    'a second boot finds every step done',
  );
  t.match(second.stdout, /bundled-chat \(already present\); loose-chat \(already present\)/);
  t.equal(readFileSync(join(data, 'audit-public-key.pem'), 'utf8'), publicKey, 'the key is not replaced');
  t.match(second.stdout, new RegExp(printed!), 'and the same fingerprint is printed');
  t.equal(new X509Certificate(readFileSync(join(data, 'tls', 'cert.pem'))).fingerprint256, cert.fingerprint256, 'nor the certificate');
});

t.test('a failing step is reported and the others still run', async (t) => {
  const dir = tempDir(t);
  const data = join(dir, 'data');
  const media = join(dir, 'media');
  mkdirSync(media);
  writeFileSync(join(media, 'qwen2.5-0.5b-instruct-q4_k_m.gguf'), 'not the real file');
  const config = join(dir, 'config.json');
  writeFileSync(
    config,
    JSON.stringify({
      posture: 'appliance',
      listen: { host: '127.0.0.1', port: 8443 },
      tls: { cert: join(data, 'cert.pem'), key: join(data, 'key.pem') },
      dataDir: data,
      // A port nothing listens on: no TPM.
      audit: { signer: 'tpm', tcti: 'swtpm:host=127.0.0.1,port=1' },
    }),
  );
  const r = cli(['firstboot', '--config', config, '--source', media, '--tls-name', 'appliance.local']);
  t.equal(r.code, 1);
  t.match(r.stdout, /audit-key +FAILED: /);
  t.match(r.stdout, /models +FAILED: .*qwen2.5-0.5b-instruct-q4_k_m.gguf is 17 bytes; the manifest says/);
  t.match(r.stdout, /tls +self-signed certificate made/, 'the certificate is still made');
  t.match(r.stdout, /audit public key +NONE/);
  t.match(r.stdout, /a step FAILED/);
  const json = cli(['firstboot', '--config', config, '--source', media, '--json']);
  t.equal(json.code, 1);
  t.equal(json.json.ok, false);
  t.equal(json.json.steps.find((s: { step: string }) => s.step === 'tls').outcome, 'skipped');
});
