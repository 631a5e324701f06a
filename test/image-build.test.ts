// The appliance image's build configuration and device-side scripts, fast (the whole build is
// test/image-build-slow.test.ts, under SOVEREIGN_IMAGE_TEST=1): the package list, the disk layout systemd-repart makes
// from image-build/partitions (on small stand-in images), the sealed configuration, the boot units, and the A/B
// update script against stand-in slot files: signed payloads only, verified before and after writing, the other slot
// only, an entry on trial.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync, copyFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import t from 'tap';
import { cli, startDaemon, tempDir } from './helpers/daemon.js';
import { selfSignedCert } from './helpers/tls.js';

const IMAGE_BUILD = resolve(import.meta.dirname, '..', 'image-build');
const ROOTFS = join(IMAGE_BUILD, 'rootfs');
const UPDATE = join(ROOTFS, 'usr', 'lib', 'sovereign', 'update');

/** image.conf's values, as the build's bash reads them. */
function imageConf(): Record<string, string> {
  const out = execFileSync('bash', ['--norc', '--noprofile', '-c', `set -a; . "${IMAGE_BUILD}/image.conf"; env -0`], {
    encoding: 'utf8',
    env: {},
  });
  return Object.fromEntries(
    out
      .split('\0')
      .filter(Boolean)
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

t.test('image.conf: Debian packages for the daemon, the kernel and verity; no compilers', async (t) => {
  const conf = imageConf();
  t.equal(conf.SUITE, 'bookworm');
  const packages = conf.PACKAGES.split(/\s+/);
  for (const needed of [
    'systemd',
    'linux-image-amd64',
    'dracut',
    'systemd-boot-efi',
    'tpm2-tools',
    'ffmpeg',
    'openssl',
    'cryptsetup-bin',
    'e2fsprogs',
  ]) {
    t.ok(packages.includes(needed), `${needed} is installed`);
  }
  for (const banned of ['gcc', 'g++', 'make', 'build-essential', 'nodejs', 'npm', 'cpp']) {
    t.notOk(packages.includes(banned), `${banned} is not`);
  }
  t.ok(
    Number(conf.ROOT_SLOT_MIB) >= 1024 && Number(conf.VERITY_SLOT_MIB) >= Number(conf.ROOT_SLOT_MIB) / 64,
    'a verity slot holds a full slot’s hash tree',
  );
  t.ok(Number(conf.BOOT_TRIES) >= 1);
  t.match(conf.CMDLINE_EXTRA, /rd\.shell=0/, 'no shell in the initrd on failure');
  // Without a reboot after a failed boot, systemd-boot never counts the try and the machine waits for a person.
  t.match(conf.CMDLINE_EXTRA, /rd\.emergency=reboot/, 'a failed initrd reboots');
  t.match(conf.CMDLINE_EXTRA, /(^| )panic=[1-9]\d*( |$)/, 'a panic (a block failing dm-verity) reboots');
});

t.test('the build says which option lacks its value, and which argument it does not know', async (t) => {
  for (const option of ['--manifest', '--config', '--models-bundle']) {
    const r = spawnSync(join(IMAGE_BUILD, 'build'), [option], { encoding: 'utf8' });
    t.equal(r.status, 2, option);
    t.equal(r.stderr, `image-build: ${option} needs a value (see --help)\n`);
  }
  const unknown = spawnSync(join(IMAGE_BUILD, 'build'), ['--manifets', 'm.json'], { encoding: 'utf8' });
  t.equal(unknown.status, 2);
  t.match(unknown.stderr, /unknown argument '--manifets'/);
  t.match(
    spawnSync(join(IMAGE_BUILD, 'build'), ['--help'], { encoding: 'utf8' }).stdout,
    /--manifest FILE +the models manifest sealed in the image/,
  );
});

t.test('the disk: ESP, two equal root slots with their verity partitions, the data partition last', async (t) => {
  const dir = tempDir(t);
  const work = join(dir, 'work');
  mkdirSync(work);
  const root = Buffer.alloc(3 * 1024 * 1024, 7);
  writeFileSync(join(work, 'root.img'), root);
  writeFileSync(join(work, 'root.verity'), Buffer.alloc(64 * 1024, 9));
  execFileSync('truncate', ['-s', '256M', join(work, 'esp.img')]);
  const size = execFileSync(join(IMAGE_BUILD, 'partitions'), [join(work, 'repart.d'), work], { encoding: 'utf8' }).trim();
  t.match(size, /^\d+M$/);
  t.same(readdirSync(join(work, 'repart.d')).sort(), [
    '00-esp.conf',
    '10-root-a.conf',
    '11-root-a-verity.conf',
    '20-root-b.conf',
    '21-root-b-verity.conf',
    '40-data.conf',
  ]);
  const disk = join(dir, 'disk.img');
  const conf = imageConf();
  const made = spawnSync(
    'systemd-repart',
    [
      '--empty=create',
      `--size=${size}`,
      `--seed=${conf.REPART_SEED}`,
      `--definitions=${join(work, 'repart.d')}`,
      '--dry-run=no',
      '--json=short',
      disk,
    ],
    { encoding: 'utf8' },
  );
  t.equal(made.status, 0, made.stderr);
  const table = JSON.parse(execFileSync('sfdisk', ['-J', disk], { encoding: 'utf8' })).partitiontable;
  const parts = table.partitions as Array<{ name: string; type: string; size: number; start: number; uuid: string }>;
  t.same(
    parts.map((p) => p.name),
    ['ESP', 'root-a', 'root-a-verity', 'root-b', 'root-b-verity', 'sovereign-data'],
  );
  const type = (name: string) => parts.find((p) => p.name === name)!.type;
  t.equal(type('ESP'), 'C12A7328-F81F-11D2-BA4B-00A0C93EC93B', 'the EFI system partition');
  t.equal(type('root-a'), '4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709', 'root (x86-64)');
  t.equal(type('root-a-verity'), '2C7357ED-EBD2-46D9-AEC1-23D437EC2BF5', 'root verity (x86-64)');
  const sizeOf = (name: string) => parts.find((p) => p.name === name)!.size;
  t.equal(sizeOf('root-a'), sizeOf('root-b'), 'both slots are the same size');
  t.equal(sizeOf('root-a') * 512, Number(conf.ROOT_SLOT_MIB) * 1024 * 1024);
  t.equal(sizeOf('root-a-verity'), sizeOf('root-b-verity'));
  t.ok(sizeOf('sovereign-data') * 512 >= Number(conf.DATA_MIB) * 1024 * 1024);
  const a = parts.find((p) => p.name === 'root-a')!;
  const written = Buffer.alloc(root.length);
  const fd = (await import('node:fs')).openSync(disk, 'r');
  (await import('node:fs')).readSync(fd, written, 0, root.length, a.start * 512);
  t.ok(written.equals(root), 'slot A holds the root filesystem image');

  const again = join(dir, 'again.img');
  spawnSync('systemd-repart', [
    '--empty=create',
    `--size=${size}`,
    `--seed=${conf.REPART_SEED}`,
    `--definitions=${join(work, 'repart.d')}`,
    '--dry-run=no',
    again,
  ]);
  const uuids = (f: string) =>
    JSON.parse(execFileSync('sfdisk', ['-J', f], { encoding: 'utf8' })).partitiontable.partitions.map((p: { uuid: string }) => p.uuid);
  t.same(uuids(again), uuids(disk), 'the same seed, the same partition UUIDs');
});

t.test('the sealed configuration is valid for the appliance posture once first boot has made the certificate', async (t) => {
  const dir = tempDir(t);
  const config = JSON.parse(readFileSync(join(ROOTFS, 'etc', 'sovereign', 'config.json'), 'utf8'));
  t.equal(config.posture, 'appliance');
  t.equal(config.audit.signer, 'tpm', 'checkpoints are signed in the TPM');
  t.equal(config.tls.cert.startsWith('/var/lib/sovereign/'), true, 'the certificate lives on the data partition');
  const before = cli(['config', 'check', '--config', join(ROOTFS, 'etc', 'sovereign', 'config.json')]);
  t.equal(before.code, 1);
  t.match(before.stdout + before.stderr, /'tls.cert' names '\/var\/lib\/sovereign\/tls\/cert.pem', which does not exist/);
  const { selfSignedCert } = await import('./helpers/tls.js');
  const tls = selfSignedCert(dir);
  const file = join(dir, 'config.json');
  writeFileSync(
    file,
    JSON.stringify({ ...config, tls: { cert: tls.cert, key: tls.key }, dataDir: join(dir, 'data'), modelsDir: join(dir, 'models') }),
  );
  const after = cli(['config', 'check', '--config', file]);
  t.equal(after.code, 0, after.stderr);

  const socket = readFileSync(join(ROOTFS, 'etc', 'systemd', 'system', 'sovereign.socket.d', 'appliance.conf'), 'utf8');
  t.match(socket, new RegExp(`ListenStream=0\\.0\\.0\\.0:${config.listen.port}`), 'the socket listens on the configured port');
  t.match(
    readFileSync(join(ROOTFS, 'etc', 'fstab'), 'utf8'),
    /PARTLABEL=sovereign-data\s+\/var\s+ext4\s+\S*x-systemd.requires=sovereign-data.service/,
  );
  t.match(readFileSync(join(ROOTFS, 'etc', 'fstab'), 'utf8'), /\/var\s+ext4\s+\S*x-systemd.growfs/, '/var grows to its partition');
});

t.test('the boot units: data partition before /var, first boot before the daemon, health gates boot-complete', async (t) => {
  const unit = (name: string) => readFileSync(resolve(import.meta.dirname, '..', 'systemd', name), 'utf8');
  const data = unit('sovereign-data.service');
  t.match(data, /Before=var.mount/);
  t.match(data, /ExecStart=\/usr\/lib\/sovereign\/data-partition /);
  const first = unit('sovereign-firstboot.service');
  t.match(first, /Before=sovereign.service/);
  t.match(first, /ExecStart=-\/usr\/bin\/node \/opt\/sovereign\/dist\/cli\/main.js firstboot/);
  t.match(first, /User=sovereign/);
  const healthy = unit('sovereign-healthy.service');
  t.match(healthy, /Before=boot-complete.target/);
  t.match(healthy, /RequiredBy=boot-complete.target/);
  t.match(healthy, /^Wants=sovereign.socket$/m, 'a failed socket still ends in the check (Wants, not Requires)');
  t.ok(existsSync(join(ROOTFS, 'usr', 'lib', 'sovereign', 'healthy.mjs')));
  // Emergency mode on a slot on trial reboots; the trial is the same EFI variable the boot assessment reads.
  const failed = unit('sovereign-trial-failed.service');
  t.match(failed, /^WantedBy=emergency.target/m);
  t.match(failed, /^SuccessAction=reboot$/m);
  const counting = /'(\/sys\/firmware\/efi\/efivars\/LoaderBootCountPath-[0-9a-f-]+)'/.exec(
    readFileSync(join(ROOTFS, 'usr', 'lib', 'sovereign', 'healthy.mjs'), 'utf8'),
  );
  t.ok(counting, 'the boot assessment reads LoaderBootCountPath');
  t.match(failed, new RegExp(`^ConditionPathExists=${counting?.[1]}$`, 'm'), 'only on a boot systemd-boot is counting');
  for (const name of [
    'sovereign-data.service',
    'sovereign-firstboot.service',
    'sovereign-healthy.service',
    'sovereign-trial-failed.service',
  ]) {
    const r = spawnSync('systemd-analyze', ['verify', '--man=no', resolve(import.meta.dirname, '..', 'systemd', name)], {
      encoding: 'utf8',
    });
    // Paths that exist only in the image (/opt/sovereign, /usr/lib/sovereign) are the only complaints allowed.
    const problems = r.stderr
      .split('\n')
      .filter(Boolean)
      .filter((l) => !/Command \/usr\/lib\/sovereign\/[a-z-]+ is not executable: No such file or directory/.test(l));
    t.same(problems, [], `${name} parses`);
  }
});

t.test('boot assessment: a slot on trial is good once the daemon answers; one that never answers reboots', async (t) => {
  const dir = tempDir(t);
  const healthy = join(ROOTFS, 'usr', 'lib', 'sovereign', 'healthy.mjs');
  // systemctl stands in for the machine's reboot: it records that it was asked. The EFI variable systemd-boot sets
  // on a counted boot is a file here.
  const bin = join(dir, 'bin');
  mkdirSync(bin);
  const asked = join(dir, 'reboot-asked');
  writeFileSync(join(bin, 'systemctl'), `#!/bin/sh\necho "$@" >> ${asked}\n`, { mode: 0o755 });
  const counting = join(dir, 'LoaderBootCountPath');
  writeFileSync(counting, 'on trial');
  const assess = (url: string, seconds: number, onTrial: boolean) =>
    new Promise<{ code: number | null; out: string }>((res) => {
      const child = spawn(process.execPath, [healthy, '--assess', url, String(seconds)], {
        env: {
          PATH: `${bin}:${process.env.PATH}`,
          SOVEREIGN_BOOT_COUNTING: onTrial ? counting : join(dir, 'no-such-variable'),
        },
      });
      let out = '';
      child.stdout.on('data', (c) => (out += c));
      child.stderr.on('data', (c) => (out += c));
      child.on('close', (code) => res({ code, out }));
    });
  const reboots = () => (existsSync(asked) ? readFileSync(asked, 'utf8').trim().split('\n') : []);

  // The daemon itself, in the appliance posture: its unauthenticated 401 proves the whole stack serves.
  const dataDir = join(dir, 'data');
  mkdirSync(dataDir);
  const tls = selfSignedCert(dataDir);
  const daemon = await startDaemon(t, ['--posture', 'appliance', '--host', '127.0.0.1', '--data-dir', dataDir], {
    SOVEREIGN_TLS_CERT: tls.cert,
    SOVEREIGN_TLS_KEY: tls.key,
  });
  const good = await assess(`${daemon.baseURL}/health`, 20, true);
  t.equal(good.code, 0, good.out);
  t.match(good.out, /\(HTTP 401\): this boot is good/);
  t.same(reboots(), [], 'an answering daemon never reboots');

  // Something else on the port (not the daemon's error shape) does not count as the daemon answering.
  const other = createServer({ key: readFileSync(tls.key), cert: readFileSync(tls.cert) }, (_req, res) => res.end('ok'));
  await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
  t.teardown(() => other.close());
  const port = (other.address() as AddressInfo).port;
  const impostor = await assess(`https://127.0.0.1:${port}/v1/health`, 3, true);
  t.equal(impostor.code, 1);
  t.match(impostor.out, /did not answer .* within 3 s/);
  t.match(impostor.out, /on trial .* rebooting/);
  t.same(reboots(), ['reboot'], 'on trial, no answer in time reboots the machine (a try used)');

  // Not on trial (a normal boot, or a slot already marked good): it reports, and never reboots.
  await daemon.stop();
  const down = await assess(daemon.baseURL + '/health', 3, false);
  t.equal(down.code, 1);
  t.same(reboots(), ['reboot'], 'no reboot when systemd-boot is not counting this boot');
});

t.test('A/B update: only a signed payload, verified before and after writing, into the other slot, on trial', async (t) => {
  const dir = tempDir(t);
  // A payload: a small root filesystem stand-in, its hash tree and root hash, a kernel and initrd stand-in.
  const payload = join(dir, 'payload');
  mkdirSync(payload);
  const rootImg = Buffer.alloc(1024 * 1024);
  for (let i = 0; i < rootImg.length; i += 4096) rootImg.write(`block ${i / 4096} of the new root`, i);
  writeFileSync(join(payload, 'root.img'), rootImg);
  execFileSync(
    'veritysetup',
    ['format', '--root-hash-file', join(dir, 'roothash'), join(payload, 'root.img'), join(payload, 'root.verity')],
    {
      stdio: 'ignore',
    },
  );
  const roothash = readFileSync(join(dir, 'roothash'), 'utf8').trim();
  writeFileSync(join(payload, 'vmlinuz'), 'kernel');
  writeFileSync(join(payload, 'initrd'), 'initrd');
  const sha = (f: string) =>
    createHash('sha256')
      .update(readFileSync(join(payload, f)))
      .digest('hex');
  const info = {
    format: 'sovereign-image/1',
    version: '0.2.0+abc',
    rootHash: roothash,
    sourceDateEpoch: 1795000000,
    files: Object.fromEntries(['root.img', 'root.verity', 'vmlinuz', 'initrd'].map((f) => [f, sha(f)])),
  };
  writeFileSync(join(payload, 'image.json'), `${JSON.stringify(info, null, 2)}\n`);
  const keys = join(dir, 'update-keys');
  mkdirSync(keys);
  t.equal(cli(['models', 'bundle-key', '--out', join(dir, 'vendor')]).code, 0);
  copyFileSync(join(dir, 'vendor.pub'), join(keys, 'vendor.pub'));
  const signed = spawnSync(join(IMAGE_BUILD, 'sign-update'), [payload, join(dir, 'vendor.key')], { encoding: 'utf8' });
  t.equal(signed.status, 0, signed.stderr);

  // The device: slot files, an ESP directory, a kernel command line that says slot a is running.
  const device = (slot: 'a' | 'b') => {
    const d = join(dir, `device-${slot}-${Math.random().toString(36).slice(2)}`);
    const parts = join(d, 'by-partlabel');
    mkdirSync(parts, { recursive: true });
    for (const name of ['root-a', 'root-b']) execFileSync('truncate', ['-s', '4M', join(parts, name)]);
    for (const name of ['root-a-verity', 'root-b-verity']) execFileSync('truncate', ['-s', '1M', join(parts, name)]);
    writeFileSync(join(parts, `root-${slot}`), Buffer.alloc(4 * 1024 * 1024, 1));
    const esp = join(d, 'esp');
    mkdirSync(join(esp, 'loader', 'entries'), { recursive: true });
    writeFileSync(join(esp, 'loader', 'entries', `sovereign-${slot}.conf`), 'the running slot’s entry');
    writeFileSync(join(d, 'cmdline'), `roothash=00 root=/dev/mapper/root ro sovereign.slot=${slot} console=ttyS0,115200 quiet\n`);
    const env = {
      ...process.env,
      SOVEREIGN_UPDATE_KEYS_DIR: keys,
      SOVEREIGN_CMDLINE: join(d, 'cmdline'),
      SOVEREIGN_PARTITIONS: parts,
      SOVEREIGN_ESP_DIR: esp,
    };
    return { d, parts, esp, run: (p = payload) => spawnSync(UPDATE, [p], { encoding: 'utf8', env }) };
  };

  const onA = device('a');
  const running = readFileSync(join(onA.parts, 'root-a'));
  const r = onA.run();
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /signed by vendor.pub/);
  t.match(r.stdout, /writing 0.2.0\+abc to slot b \(running: a\)/);
  t.ok(readFileSync(join(onA.parts, 'root-b')).subarray(0, rootImg.length).equals(rootImg), 'slot b holds the new root');
  t.ok(readFileSync(join(onA.parts, 'root-a')).equals(running), 'the running slot is untouched');
  const verify = spawnSync('veritysetup', ['verify', join(onA.parts, 'root-b'), join(onA.parts, 'root-b-verity'), roothash]);
  t.equal(verify.status, 0, 'slot b verifies against the root hash');
  const entry = readFileSync(join(onA.esp, 'loader', 'entries', 'sovereign-b+3.conf'), 'utf8');
  t.match(entry, /^title Sovereign 0.2.0\+abc \(slot b\)$/m);
  t.match(entry, /^version 1795000000$/m, 'newer builds sort first');
  t.match(
    entry,
    new RegExp(
      `^options roothash=${roothash} systemd.verity_root_data=PARTLABEL=root-b systemd.verity_root_hash=PARTLABEL=root-b-verity .* sovereign.slot=b console=ttyS0,115200 quiet$`,
      'm',
    ),
  );
  t.equal(readFileSync(join(onA.esp, 'sovereign', 'b', 'vmlinuz'), 'utf8'), 'kernel');
  t.equal(readFileSync(join(onA.esp, 'loader', 'entries', 'sovereign-a.conf'), 'utf8'), 'the running slot’s entry');

  const onB = device('b');
  const fromB = onB.run();
  t.equal(fromB.status, 0, fromB.stderr);
  t.ok(existsSync(join(onB.esp, 'loader', 'entries', 'sovereign-a+3.conf')), 'running on b, the update goes to a');

  // Refusals: each leaves the other slot as it was.
  const refuse = async (name: string, change: (p: string) => void, message: RegExp) => {
    const p = join(dir, name);
    (await import('node:fs')).cpSync(payload, p, { recursive: true });
    change(p);
    const dev = device('a');
    const before = readFileSync(join(dev.parts, 'root-b'));
    const out = dev.run(p);
    t.equal(out.status, 1, name);
    t.match(out.stderr, message, name);
    t.ok(readFileSync(join(dev.parts, 'root-b')).equals(before), `${name}: slot b untouched`);
    t.notOk(
      readdirSync(join(dev.esp, 'loader', 'entries')).some((f) => f.startsWith('sovereign-b')),
      `${name}: no entry`,
    );
  };
  await refuse('unsigned', (p) => writeFileSync(join(p, 'image.json.sig'), Buffer.alloc(64)), /not signed by any key/);
  await refuse(
    'other-signer',
    (p) => {
      cli(['models', 'bundle-key', '--out', join(dir, 'stranger')]);
      spawnSync(join(IMAGE_BUILD, 'sign-update'), [p, join(dir, 'stranger.key')]);
    },
    /not signed by any key/,
  );
  await refuse(
    'changed-root',
    (p) => {
      const b = readFileSync(join(p, 'root.img'));
      b[5000] ^= 1;
      writeFileSync(join(p, 'root.img'), b);
    },
    /root.img is not the file image.json names/,
  );
  await refuse(
    'too-large',
    (p) => writeFileSync(join(p, 'root.img'), Buffer.alloc(5 * 1024 * 1024)),
    /root.img is not the file|larger than slot/,
  );
  const unknown = device('a');
  writeFileSync(join(unknown.d, 'cmdline'), 'root=/dev/sda1 ro');
  const noSlot = unknown.run();
  t.equal(noSlot.status, 1);
  t.match(noSlot.stderr, /cannot tell which slot is running/);
});
