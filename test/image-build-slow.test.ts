// The whole appliance image, built here from Debian's packages (minutes, and a few hundred MB from the Debian
// mirror): run only when SOVEREIGN_IMAGE_TEST=1 (`.ci/run` passes it through; docs/install.md). It checks the disk's
// layout, the dm-verity hash of slot A with veritysetup (and that one changed byte fails it), what the root
// filesystem holds and lacks, the ESP's boot entry, and then runs first boot from the image's own root filesystem
// (chroot, in a network namespace of its own with only loopback) against a swtpm, importing the models bundle from
// the image's models partition. Where qemu-system-x86 and ovmf are installed it boots the image in QEMU, then an
// update (slot B on trial, marked good), then an update whose slot does not verify (three tries, then slot A).
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { join, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { manifestEntry, standInModel } from './fixtures/manifest-entry.js';
import { cli, tempDir } from './helpers/daemon.js';

const enabled = process.env.SOVEREIGN_IMAGE_TEST === '1';
const REPO = resolve(import.meta.dirname, '..');

if (!enabled) {
  t.pass('the image build runs only with SOVEREIGN_IMAGE_TEST=1 (docs/install.md)');
} else {
  t.setTimeout(45 * 60_000);
  const dir = tempDir(t, 'sov-image-');
  const out = join(dir, 'out');
  const work = join(dir, 'work');

  // What the installer brings: the vendor's keys, a models manifest of its own (the shipped one names models far
  // larger than a test can make, and import checks a file's header against its entry), and a bundle with one model.
  t.equal(cli(['models', 'bundle-key', '--out', join(dir, 'bundles')]).code, 0);
  t.equal(cli(['models', 'bundle-key', '--out', join(dir, 'updates')]).code, 0);
  const weights = standInModel(53);
  const sha = createHash('sha256').update(weights).digest('hex');
  const target = manifestEntry('appliance-test', 'appliance-test.gguf', null);
  const manifestFile = join(dir, 'models-manifest.json');
  writeFileSync(manifestFile, JSON.stringify({ models: [target] }));
  const staging = join(dir, 'staging');
  mkdirSync(join(staging, 'models'), { recursive: true });
  writeFileSync(join(staging, 'models', target.file), weights);
  const bundle = join(dir, 'bundle');
  const made = cli([
    'models',
    'bundle',
    '--out',
    bundle,
    '--key',
    join(dir, 'bundles.key'),
    '--id',
    target.id,
    '--data-dir',
    staging,
    '--models-dir',
    join(staging, 'models'),
    '--manifest',
    manifestFile,
  ]);
  t.equal(made.code, 0, made.stderr);

  const build = spawnSync(
    join(REPO, 'image-build', 'build'),
    [
      '--out',
      out,
      '--work',
      work,
      '--keep-work',
      '--bundle-key',
      join(dir, 'bundles.pub'),
      '--update-key',
      join(dir, 'updates.pub'),
      '--manifest',
      manifestFile,
      '--models-bundle',
      bundle,
    ],
    { encoding: 'utf8', timeout: 40 * 60_000, maxBuffer: 64 * 1024 * 1024 },
  );
  t.equal(build.status, 0, build.stderr.slice(-4000));
  const image = join(out, 'sovereign.img');
  const info = JSON.parse(readFileSync(join(out, 'image.json'), 'utf8'));
  // For comparing builds of one commit (reproducibility): the same sources should give the same root hash.
  t.comment(`build ${info.version}: root hash ${info.rootHash}, root.img ${info.files['root.img']}`);
  // Several GB (sparse): hashed by sha256sum, not read into memory.
  const imageSha = execFileSync('sha256sum', [image], { encoding: 'utf8' }).split(' ')[0];

  t.test('the build prints the image’s SHA-256 and root hash, and records them', async (t) => {
    t.match(build.stdout, new RegExp(`sha256 +${imageSha}`));
    t.match(build.stdout, new RegExp(`root hash +${info.rootHash}`));
    t.equal(info.imageSha256, imageSha);
    t.match(readFileSync(join(out, 'SHA256SUMS'), 'utf8'), `${imageSha}  sovereign.img`);
    t.match(info.node, /^v2\d\./);
  });

  const table = JSON.parse(execFileSync('sfdisk', ['-J', image], { encoding: 'utf8' })).partitiontable;
  const parts = table.partitions as Array<{ name: string; start: number; size: number }>;
  /** A partition's bytes, copied out of the image (the first `bytes` of it, or all). */
  const extract = (name: string, bytes?: number) => {
    const p = parts.find((x) => x.name === name)!;
    const file = join(dir, `${name}.part`);
    execFileSync('dd', [
      `if=${image}`,
      `of=${file}`,
      'bs=1M',
      `skip=${p.start * 512}`,
      `count=${bytes ?? p.size * 512}`,
      'iflag=skip_bytes,count_bytes',
      'status=none',
    ]);
    return file;
  };

  t.test('layout: ESP, slots A and B with verity, the models partition, the data partition', async (t) => {
    t.same(
      parts.map((p) => p.name),
      ['ESP', 'root-a', 'root-a-verity', 'root-b', 'root-b-verity', 'sovereign-models', 'sovereign-data'],
    );
  });

  t.test('slot A verifies against the root hash with veritysetup; one changed byte does not', async (t) => {
    const data = extract('root-a');
    const hash = extract('root-a-verity');
    const ok = spawnSync('veritysetup', ['verify', data, hash, info.rootHash], { encoding: 'utf8' });
    t.equal(ok.status, 0, ok.stderr);
    const fd = openSync(data, 'r+');
    const one = Buffer.alloc(1);
    readSync(fd, one, 0, 1, 5 * 1048576);
    one[0] ^= 0xff;
    writeSync(fd, one, 0, 1, 5 * 1048576);
    closeSync(fd);
    const bad = spawnSync('veritysetup', ['verify', data, hash, info.rootHash], { encoding: 'utf8' });
    t.not(bad.status, 0, 'a changed block fails verification');
  });

  t.test('the ESP boots slot A with its root hash and no editor', async (t) => {
    const esp = extract('ESP');
    const env = { ...process.env, MTOOLS_SKIP_CHECK: '1' };
    const entry = execFileSync('mtype', ['-i', esp, '::/loader/entries/sovereign-a.conf'], { encoding: 'utf8', env });
    t.match(entry, new RegExp(`roothash=${info.rootHash} systemd.verity_root_data=PARTLABEL=root-a`));
    t.match(execFileSync('mtype', ['-i', esp, '::/loader/loader.conf'], { encoding: 'utf8', env }), /editor no/);
    t.match(execFileSync('mdir', ['-i', esp, '-b', '::/EFI/BOOT'], { encoding: 'utf8', env }), /BOOTX64\.EFI/);
  });

  const rootfs = join(work, 'rootfs');
  t.test('the root filesystem: the daemon and Node, units enabled, the user; no compilers, no apt caches', async (t) => {
    t.ok(existsSync(join(rootfs, 'opt', 'sovereign', 'dist', 'cli', 'main.js')));
    for (const dev of ['tap', 'vite', 'playwright-core', 'eslint']) {
      t.notOk(existsSync(join(rootfs, 'opt', 'sovereign', 'node_modules', dev)), `no dev dependency (${dev})`);
    }
    t.notOk(existsSync(join(rootfs, 'opt', 'sovereign', 'node_modules', '@node-llama-cpp', 'linux-x64-cuda')), 'no GPU builds');
    t.match(execFileSync('chroot', [rootfs, '/usr/bin/node', '--version'], { encoding: 'utf8' }), /^v2\d\./);
    for (const tool of ['gcc', 'cc', 'g++', 'make']) t.notOk(existsSync(join(rootfs, 'usr', 'bin', tool)), `no ${tool}`);
    t.same(
      readdirSync(join(rootfs, 'var', 'lib', 'apt', 'lists')).filter((f) => f !== 'partial' && f !== 'lock' && f !== 'auxfiles'),
      [],
      'no package lists',
    );
    t.same(
      readdirSync(join(rootfs, 'var', 'cache', 'apt')).filter((f) => !['archives'].includes(f)),
      [],
      'no apt cache',
    );
    t.equal(statSync(join(rootfs, 'etc', 'machine-id')).size, 0, 'no machine identity');
    t.same(readdirSync(join(rootfs, 'efi')), [], 'an empty /efi, where the ESP is mounted (for systemd-bless-boot)');
    t.match(readFileSync(join(rootfs, 'etc', 'passwd'), 'utf8'), /^sovereign:/m);
    for (const link of [
      'sockets.target.wants/sovereign.socket',
      'multi-user.target.wants/sovereign-firstboot.service',
      'boot-complete.target.requires/sovereign-healthy.service',
      'emergency.target.wants/sovereign-trial-failed.service',
    ]) {
      // The links point into the image (/lib/systemd/...), not into this machine: look at the link itself.
      t.ok(lstatSync(join(rootfs, 'etc', 'systemd', 'system', link), { throwIfNoEntry: false })?.isSymbolicLink(), `${link} enabled`);
    }
    const config = JSON.parse(readFileSync(join(rootfs, 'etc', 'sovereign', 'config.json'), 'utf8'));
    t.same(config.models.bundleKeys, ['/etc/sovereign/bundle-keys/bundles.pub']);
    t.same(
      JSON.parse(readFileSync(join(rootfs, 'opt', 'sovereign', 'models-manifest.json'), 'utf8')).models.map((m: { id: string }) => m.id),
      [target.id],
      'the manifest given to --manifest is the one sealed in the image',
    );
    const initrd = readdirSync(join(rootfs, 'boot')).find((f) => f.startsWith('initrd.img-'))!;
    const listing = execFileSync('chroot', [rootfs, 'lsinitrd', `/boot/${initrd}`], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    t.match(listing, /systemd-veritysetup-generator/, 'the initrd sets up dm-verity from roothash=');
    t.match(listing, /dm-verity\.ko/);
  });

  t.test('first boot from the image, in a chroot without network, against a swtpm', async (t) => {
    // An overlay keeps the built tree as it is; the data directory and the mounted models partition live above it.
    const upper = join(dir, 'upper');
    const workdir = join(dir, 'overlay-work');
    const merged = join(dir, 'merged');
    for (const d of [upper, workdir, merged]) mkdirSync(d, { recursive: true });
    execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${rootfs},upperdir=${upper},workdir=${workdir}`, merged]);
    t.teardown(() => spawnSync('umount', ['-R', merged]));
    execFileSync('mount', ['--rbind', '/dev', join(merged, 'dev')]);
    execFileSync('mount', ['-t', 'proc', 'proc', join(merged, 'proc')]);
    // The test's TPM is reached over loopback, which needs the swtpm TCTI the appliance itself does not ship.
    for (const lib of readdirSync('/usr/lib/x86_64-linux-gnu').filter((f) => f.startsWith('libtss2-tcti-swtpm.so'))) {
      execFileSync('cp', ['-a', join('/usr/lib/x86_64-linux-gnu', lib), join(merged, 'usr', 'lib', 'x86_64-linux-gnu', lib)]);
    }
    const models = extract('sovereign-models');
    const media = join(merged, 'run', 'sovereign', 'media', 'media-1');
    mkdirSync(media, { recursive: true });
    execFileSync('mount', ['-o', 'loop,ro,nosuid,nodev,noexec', models, media]);
    const state = join(merged, 'var', 'lib', 'sovereign');
    mkdirSync(state, { recursive: true });
    execFileSync('chroot', [merged, 'chown', 'sovereign:sovereign', '/var/lib/sovereign']);
    execFileSync('chmod', ['0700', state]);

    const tpmState = join(dir, 'tpm');
    mkdirSync(tpmState);
    const script = [
      'ip link set lo up',
      // swtpm's output goes nowhere: a process left holding this script's pipes would keep it from ending.
      `swtpm socket --tpm2 --server type=tcp,port=2321,bindaddr=127.0.0.1 --ctrl type=tcp,port=2322,bindaddr=127.0.0.1 --flags not-need-init,startup-clear --tpmstate dir=${tpmState} >/dev/null 2>&1 & tpm=$!`,
      "trap 'kill $tpm' EXIT",
      'for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/2321) 2>/dev/null && break; sleep 0.1; done',
      // The image's own environment, not this test runner's (whose NODE_OPTIONS name files outside the chroot).
      `env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SOVEREIGN_AUDIT_TCTI=swtpm:host=127.0.0.1,port=2321 chroot --userspec=sovereign:sovereign ${merged} /usr/bin/node /opt/sovereign/dist/cli/main.js firstboot --config /etc/sovereign/config.json`,
    ].join('\n');
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((res) => {
      const child = spawn('unshare', ['--net', 'bash', '-c', script], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c) => (stdout += c));
      child.stderr.on('data', (c) => (stderr += c));
      const timer = setTimeout(() => child.kill('SIGKILL'), 5 * 60_000);
      child.on('close', (code) => {
        clearTimeout(timer);
        res({ code, stdout, stderr });
      });
    });
    t.equal(run.code, 0, run.stdout + run.stderr);
    t.match(run.stdout, /audit-key +signing key created in the TPM/);
    t.match(run.stdout, new RegExp(`models +${target.id} \\(imported from /run/sovereign/media/media-1`));
    t.match(run.stdout, /tls +self-signed certificate made/);
    const publicKey = readFileSync(join(state, 'audit-public-key.pem'), 'utf8');
    t.ok(run.stdout.includes(publicKey.trim()), 'the audit public key is printed for the installer');
    t.match(run.stdout, /audit public key +SHA256:[0-9a-f:]{95}/);
    t.equal(
      createHash('sha256')
        .update(readFileSync(join(state, 'models', target.file)))
        .digest('hex'),
      sha,
    );
    const owner = statSync(join(state, 'audit-public-key.pem')).uid;
    t.not(owner, 0, 'what first boot made belongs to the daemon’s user, not root');
  });

  const qemu = existsSync('/usr/share/OVMF/OVMF_CODE_4M.fd') && spawnSync('qemu-system-x86_64', ['--version']).status === 0;
  const boots = 'the image boots in QEMU (UEFI, dm-verity root, swtpm as its TPM) and the daemon answers';
  t.test(boots, { skip: qemu ? false : 'qemu-system-x86 and ovmf are not installed' }, async (t) => {
    // Flashed onto a disk 2 GiB larger than the image: first boot grows the data partition to the disk's end.
    const larger = join(dir, 'larger.img');
    execFileSync('cp', ['--sparse=always', image, larger]);
    execFileSync('truncate', ['-s', '+2G', larger]);
    const boot = spawnSync(join(REPO, 'image-build', 'qemu-boot'), [larger, '--port', '18943', '--timeout', '1500'], {
      encoding: 'utf8',
      timeout: 30 * 60_000,
    });
    t.equal(boot.status, 0, boot.stdout.slice(-3000) + boot.stderr.slice(-3000));
    t.match(
      boot.stdout,
      /sovereign answers at https:\/\/127\.0\.0\.1:18943\/v1\/health \(HTTP 401\)/,
      'the daemon answers, asking for a key',
    );
    const grown = /data partition \S+ grown from (\d+) MiB to (\d+) MiB/.exec(boot.stdout);
    t.ok(grown, 'the data partition grew into the rest of the disk');
    t.ok(
      grown && Number(grown[2]) - Number(grown[1]) > 2000,
      `by the 2 GiB the disk has beyond the image (${grown?.slice(1).join(' -> ')} MiB)`,
    );
    t.match(boot.stdout, /data partition \/dev\/disk\/by-partlabel\/sovereign-data formatted/, 'the data partition got its filesystem');
    t.match(boot.stdout, /audit-key +signing key created in the TPM/, 'first boot made the key in the TPM');
    t.match(
      boot.stdout,
      new RegExp(`models +${target.id} \\(imported from /run/sovereign/media/media-1\\)`),
      'and imported the bundle from the models partition',
    );
    t.match(boot.stdout, /audit public key +SHA256:[0-9a-f:]{95}/);
  });

  /**
   * What a device in the field does with an update: a copy of the image (as first flashed) gets a newer build of the
   * same root filesystem written into slot B by the update script, running as it would on slot A, and its entry on
   * trial. Returns the disk, the byte where slot B starts, and a reader of the boot entries on (a copy of) that disk.
   */
  const updatedDisk = (t: Test, name: string, extraOptions = '') => {
    const disk = join(dir, `${name}.img`);
    const scratch = join(dir, name);
    mkdirSync(scratch);
    execFileSync('cp', ['--sparse=always', image, disk]);
    // The payload with a later build time, signed again.
    const payload = join(scratch, 'payload');
    execFileSync('cp', ['-a', join(out, 'update'), payload]);
    const next = JSON.parse(readFileSync(join(payload, 'image.json'), 'utf8'));
    next.sourceDateEpoch += 100;
    next.version += '-next';
    writeFileSync(join(payload, 'image.json'), `${JSON.stringify(next, null, 2)}\n`);
    execFileSync(join(REPO, 'image-build', 'sign-update'), [payload, join(dir, 'updates.key')]);
    // The device's partitions as loop devices at their offsets.
    const layout = JSON.parse(execFileSync('sfdisk', ['-J', disk], { encoding: 'utf8' })).partitiontable.partitions as Array<{
      name: string;
      start: number;
      size: number;
    }>;
    const parts = join(scratch, 'by-partlabel');
    const esp = join(scratch, 'esp');
    mkdirSync(parts);
    mkdirSync(join(esp, 'loader', 'entries'), { recursive: true });
    const espStart = layout.find((x) => x.name === 'ESP')!.start * 512;
    const espImage = `${disk}@@${espStart}`;
    const loops: string[] = [];
    try {
      for (const part of ['root-a', 'root-a-verity', 'root-b', 'root-b-verity']) {
        const p = layout.find((x) => x.name === part)!;
        const loop = execFileSync(
          'losetup',
          ['--find', '--show', '--offset', String(p.start * 512), '--sizelimit', String(p.size * 512), disk],
          { encoding: 'utf8' },
        ).trim();
        loops.push(loop);
        symlinkSync(loop, join(parts, part));
      }
      const keys = join(scratch, 'update-keys');
      mkdirSync(keys);
      execFileSync('cp', [join(dir, 'updates.pub'), keys]);
      // Slot A's command line, as the ESP's entry gives it (the update copies what follows sovereign.slot=).
      const slotA = execFileSync('mtype', ['-i', espImage, '::/loader/entries/sovereign-a.conf'], mtools);
      writeFileSync(join(scratch, 'cmdline'), `${/^options (.*)$/m.exec(slotA)![1]}\n`);
      const update = spawnSync(join(REPO, 'image-build', 'rootfs', 'usr', 'lib', 'sovereign', 'update'), [payload], {
        encoding: 'utf8',
        env: {
          ...process.env,
          SOVEREIGN_UPDATE_KEYS_DIR: keys,
          SOVEREIGN_CMDLINE: join(scratch, 'cmdline'),
          SOVEREIGN_PARTITIONS: parts,
          SOVEREIGN_ESP_DIR: esp,
        },
      });
      t.equal(update.status, 0, update.stderr);
      t.ok(existsSync(join(esp, 'loader', 'entries', 'sovereign-b+3.conf')), 'slot B has an entry on trial');
      t.match(readFileSync(join(esp, 'loader', 'entries', 'sovereign-b+3.conf'), 'utf8'), / panic=10 /, 'that reboots on a panic');
    } finally {
      for (const l of loops) spawnSync('losetup', ['-d', l]);
    }
    // A slot made to fail on purpose gets more kernel options in its entry.
    if (extraOptions) {
      const entry = join(esp, 'loader', 'entries', 'sovereign-b+3.conf');
      writeFileSync(entry, readFileSync(entry, 'utf8').replace(/^(options .*)$/m, `$1 ${extraOptions}`));
    }
    // The script wrote into a directory; its files go onto the image's ESP with mtools (the kernel of the machine
    // running this test may have no vfat; on the device the script mounts the ESP itself).
    execFileSync('mcopy', ['-o', '-s', '-i', espImage, join(esp, 'sovereign', 'b'), '::/sovereign/'], mtools);
    execFileSync('mcopy', ['-o', '-i', espImage, join(esp, 'loader', 'entries', 'sovereign-b+3.conf'), '::/loader/entries/'], mtools);
    t.match(execFileSync('mdir', ['-b', '-i', espImage, '::/loader/entries'], mtools), /sovereign-b\+3\.conf/);
    return { disk, rootB: layout.find((x) => x.name === 'root-b')!.start * 512, entries: (d: string) => entries(d, espStart) };
  };
  const mtools = { encoding: 'utf8' as const, env: { ...process.env, MTOOLS_SKIP_CHECK: '1' } };
  /** The boot entries on the ESP of the disk image `disk` (whose ESP starts at byte `espStart`). */
  const entries = (disk: string, espStart: number) =>
    execFileSync('mdir', ['-b', '-i', `${disk}@@${espStart}`, '::/loader/entries'], mtools)
      .split('\n')
      .map((l) => l.replace('::/loader/entries/', '').trim())
      .filter(Boolean)
      .sort();
  /** Boots `disk` with qemu-boot and leaves the machine running: its work directory and how to stop it. */
  const bootKept = (t: Test, disk: string, port: number) => {
    const boot = spawnSync(join(REPO, 'image-build', 'qemu-boot'), [disk, '--port', String(port), '--timeout', '1500', '--keep'], {
      encoding: 'utf8',
      timeout: 30 * 60_000,
    });
    t.equal(boot.status, 0, boot.stdout.slice(-3000) + boot.stderr.slice(-3000));
    const kept = /kept: (\S+); stop with: kill (\d+) (\d+)/.exec(boot.stdout + boot.stderr);
    t.ok(kept, 'the machine was kept running');
    if (!kept) return undefined;
    const stop = () => spawnSync('kill', [kept[2], kept[3]]);
    t.teardown(() => {
      stop();
      execFileSync('rm', ['-rf', kept[1]]);
    });
    const console = () => readFileSync(join(kept[1], 'console.log'), 'latin1').replace(/\x1b\[[0-9;]*[a-zA-Z]/g, '');
    return { disk: join(kept[1], 'disk.img'), console, stop };
  };

  t.test(
    'an update: the script writes slot B, systemd-boot starts it on trial, and it is marked good',
    { skip: qemu ? false : 'qemu-system-x86 and ovmf are not installed' },
    async (t) => {
      const updated = updatedDisk(t, 'updated');
      const vm = bootKept(t, updated.disk, 18944);
      if (!vm) return;
      // The daemon answered, so sovereign-healthy.service lets boot-complete.target through and systemd-bless-boot
      // renames the entry without its counter on the ESP (mounted at /efi by systemd-gpt-auto-generator).
      let now = updated.entries(vm.disk);
      for (let i = 0; i < 36 && !now.includes('sovereign-b.conf'); i++) {
        await new Promise((r) => setTimeout(r, 5_000));
        now = updated.entries(vm.disk);
      }
      vm.stop();
      t.match(
        vm.console(),
        /node\[\d+\]: sovereign answers at https:\/\/127\.0\.0\.1:443\/v1\/health \(HTTP 401\): this boot is good/,
        'on the machine, sovereign-healthy.service saw the daemon answer (boot-complete.target, on a counted boot only)',
      );
      // systemd-bless-boot renames the entry the machine booted (LoaderBootCountPath): slot B's, so B was booted.
      t.same(now, ['sovereign-a.conf', 'sovereign-b.conf'], 'slot B is good (its counter is gone); slot A stays, to go back to');
    },
  );

  t.test(
    'a slot that does not boot: each try panics and reboots, and after the last one systemd-boot starts slot A',
    { skip: qemu ? false : 'qemu-system-x86 and ovmf are not installed' },
    async (t) => {
      const broken = updatedDisk(t, 'broken');
      // Slot B's EROFS superblock changed on the disk after the update wrote and verified it: dm-verity refuses the
      // first block the kernel reads from it.
      const fd = openSync(broken.disk, 'r+');
      writeSync(fd, Buffer.alloc(1024, 0x5a), 0, 1024, broken.rootB + 1024);
      closeSync(fd);
      const vm = bootKept(t, broken.disk, 18945);
      if (!vm) return;
      vm.stop();
      const log = vm.console();
      // A boot may log more than one bad block before its panic: at least one per try.
      t.ok(
        (log.match(/device-mapper: verity: [\d:]+: data block \d+ is corrupted/g) ?? []).length >= 3,
        'three tries, each refused by dm-verity',
      );
      t.equal((log.match(/Rebooting in 10 seconds/g) ?? []).length, 3, 'each ended in a reboot (panic=10)');
      t.same(
        broken.entries(vm.disk),
        ['sovereign-a.conf', 'sovereign-b+0-3.conf'],
        'slot B used its three tries; slot A is what answered, unchanged',
      );
    },
  );

  t.test(
    'a slot that falls into emergency mode: each try reboots, and after the last one systemd-boot starts slot A',
    { skip: qemu ? false : 'qemu-system-x86 and ovmf are not installed' },
    async (t) => {
      // Slot B's entry starts emergency.target, where a failed mount or another failed unit the boot needs leads
      // (masking one instead would fail the boot's whole transaction, not one unit). Its root account is locked.
      const stuck = updatedDisk(t, 'emergency', 'systemd.unit=emergency.target');
      const vm = bootKept(t, stuck.disk, 18946);
      if (!vm) return;
      vm.stop();
      const log = vm.console();
      t.equal(
        (log.match(/sovereign: this slot is on trial and did not boot: rebooting/g) ?? []).length,
        3,
        'each of the three tries ended in sovereign-trial-failed.service’s reboot',
      );
      t.same(stuck.entries(vm.disk), ['sovereign-a.conf', 'sovereign-b+0-3.conf'], 'slot B used its tries; slot A answered');
    },
  );
}
