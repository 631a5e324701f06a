// Models bundles for sneaker-net transfer, through the CLI: a key is made, a bundle written from one device's models
// dir and imported on another, which checks the signature against the keys it trusts and every file against the
// signed bundle and its own manifest. Tampering with any part refuses the whole bundle.
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { manifestEntry, standInModel } from './fixtures/manifest-entry.js';
import { cli, startDaemon, tempDir } from './helpers/daemon.js';

const dir = tempDir(t);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const entry = manifestEntry;
const pinned = standInModel(1);
const unpinned = standInModel(2);
const manifest = join(dir, 'manifest.json');
writeFileSync(manifest, JSON.stringify({ models: [entry('pinned-chat', 'pinned.gguf', pinned), entry('open-chat', 'open.gguf', null)] }));

// The sender: a staging machine with both models imported.
const sender = join(dir, 'sender');
const senderModels = join(sender, 'models');
mkdirSync(senderModels, { recursive: true });
writeFileSync(join(dir, 'pinned.gguf'), pinned);
writeFileSync(join(dir, 'open.gguf'), unpinned);
const senderArgs = ['--data-dir', sender, '--models-dir', senderModels, '--manifest', manifest];
t.equal(cli(['models', 'import', join(dir, 'pinned.gguf'), ...senderArgs]).code, 0);
t.equal(cli(['models', 'import', join(dir, 'open.gguf'), '--id', 'open-chat', ...senderArgs]).code, 0);

const keyPrefix = join(dir, 'ops-2026');
const key = cli(['models', 'bundle-key', '--out', keyPrefix, '--json']);
t.equal(key.code, 0, key.stderr);

t.test('bundle-key makes an Ed25519 pair, the private half 0600, and never overwrites it', async (t) => {
  t.equal(statSync(`${keyPrefix}.key`).mode & 0o777, 0o600);
  t.match(readFileSync(`${keyPrefix}.pub`, 'utf8'), /BEGIN PUBLIC KEY/);
  t.match(key.json.fingerprint, /^SHA256:([0-9a-f]{2}:){31}[0-9a-f]{2}$/);
  const again = cli(['models', 'bundle-key', '--out', keyPrefix]);
  t.equal(again.code, 1);
  t.match(again.stderr, /never overwritten/);
});

const bundle = join(dir, 'usb', 'bundle-1');
t.test('bundle writes the models and a signed manifest', async (t) => {
  const r = cli(['models', 'bundle', '--out', bundle, '--key', `${keyPrefix}.key`, '--json', ...senderArgs]);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.json.fingerprint, key.json.fingerprint);
  t.same(
    r.json.models.map((m: { id: string; sha256: string }) => [m.id, m.sha256]),
    [
      ['pinned-chat', sha(pinned)],
      ['open-chat', sha(unpinned)],
    ],
    'every present model, with the checksum of the file as copied',
  );
  t.same(readdirSync(bundle).sort(), ['bundle.json', 'bundle.sig', 'models']);
  const doc = JSON.parse(readFileSync(join(bundle, 'bundle.json'), 'utf8'));
  t.equal(doc.format, 'sovereign-models-bundle/1');
  t.equal(doc.models[1].size, unpinned.length);
  t.ok(readFileSync(join(bundle, 'models', 'open.gguf')).equals(unpinned));

  const one = cli([
    'models',
    'bundle',
    '--out',
    join(dir, 'one'),
    '--key',
    `${keyPrefix}.key`,
    '--id',
    'pinned-chat',
    '--json',
    ...senderArgs,
  ]);
  t.same(
    one.json.models.map((m: { id: string }) => m.id),
    ['pinned-chat'],
    '--id chooses',
  );
  const notEmpty = cli(['models', 'bundle', '--out', bundle, '--key', `${keyPrefix}.key`, ...senderArgs]);
  t.equal(notEmpty.code, 1);
  t.match(notEmpty.stderr, /not empty/);
  const wrongKey = cli(['models', 'bundle', '--out', join(dir, 'x'), '--key', `${keyPrefix}.pub`, ...senderArgs]);
  t.equal(wrongKey.code, 1);
  t.match(wrongKey.stderr, /cannot read the signing key/);
  const noKey = cli(['models', 'bundle', '--out', join(dir, 'x'), ...senderArgs]);
  t.equal(noKey.code, 2);
  t.match(noKey.stderr, /needs --key FILE/);
});

/** A fresh sealed device with the same manifest; config trusts the given public keys. */
function device(name: string, trust: string[]): { args: string[]; models: string } {
  const data = join(dir, name);
  mkdirSync(data, { recursive: true });
  const config = join(data, 'config.json');
  writeFileSync(config, JSON.stringify({ dataDir: data, manifest, modelsDir: 'models', models: { bundleKeys: trust } }));
  return { args: ['--config', config], models: join(data, 'models') };
}

t.test('a device that trusts the key imports the bundle; a second import finds the models present', async (t) => {
  const d = device('device-a', [`${keyPrefix}.pub`]);
  const r = cli(['models', 'import-bundle', bundle, '--json', ...d.args]);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.json.fingerprint, key.json.fingerprint);
  t.same(
    r.json.models.map((m: { id: string; outcome: string }) => [m.id, m.outcome]),
    [
      ['pinned-chat', 'imported'],
      ['open-chat', 'imported'],
    ],
  );
  t.ok(readFileSync(join(d.models, 'open.gguf')).equals(unpinned));
  const list = cli(['models', 'list', '--json', ...d.args]);
  const open = list.json.find((m: { id: string }) => m.id === 'open-chat');
  t.equal(open.verified, true, "the unpinned model's checksum is recorded from the signed bundle");
  const again = cli(['models', 'import-bundle', bundle, '--json', ...d.args]);
  t.same(
    again.json.models.map((m: { outcome: string }) => m.outcome),
    ['present', 'present'],
  );
  const human = cli(['models', 'import-bundle', bundle, ...d.args]);
  t.match(human.stdout, /signed by SHA256:.*\n {2}pinned-chat {2}already present/);

  // Each import is in the device's audit log once its daemon has run: who, which key signed it, what each model became.
  const daemon = await startDaemon(t, d.args);
  let imports: Array<Record<string, any>> = [];
  for (let i = 0; i < 50 && imports.length < 3; i++) {
    await new Promise((r) => setTimeout(r, 200));
    const out = join(dir, `export-a-${i}`);
    t.equal(cli(['audit', 'export', ...d.args, '--out', out]).code, 0);
    imports = readFileSync(join(out, 'entries.jsonl'), 'utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, any>)
      .filter((e) => e.kind === 'bundle.imported');
  }
  t.equal(imports.length, 3, 'three imports, three entries');
  t.match(imports[0], {
    by: { cli: String },
    signer: key.json.fingerprint,
    dir: bundle,
    models: [
      { model: 'pinned-chat', file: 'pinned.gguf', sha256: /^[0-9a-f]{64}$/, outcome: 'imported' },
      { model: 'open-chat', file: 'open.gguf', sha256: /^[0-9a-f]{64}$/, outcome: 'imported' },
    ],
  });
  t.same(
    imports[1].models.map((m: { outcome: string }) => m.outcome),
    ['present', 'present'],
  );
  await daemon.stop();
});

t.test('refused: no trusted key, another key, a changed manifest, a changed file, a missing signature', async (t) => {
  const none = cli(['models', 'import-bundle', bundle, ...device('device-b', []).args]);
  t.equal(none.code, 1);
  t.match(none.stderr, /no bundle key is trusted here: list the sender’s public key in models.bundleKeys/);

  const otherPrefix = join(dir, 'someone-else');
  cli(['models', 'bundle-key', '--out', otherPrefix]);
  const other = device('device-c', [`${otherPrefix}.pub`]);
  const untrusted = cli(['models', 'import-bundle', bundle, ...other.args]);
  t.equal(untrusted.code, 1);
  t.match(untrusted.stderr, /signed by SHA256:[0-9a-f:]+, a key this device does not trust/);
  t.notOk(existsSync(join(other.models, 'pinned.gguf')), 'nothing imported');
  const trusted = cli(['models', 'import-bundle', bundle, '--trust', `${keyPrefix}.pub`, ...other.args]);
  t.equal(trusted.code, 0, '--trust names the key for one import');

  const altered = join(dir, 'altered');
  cpSync(bundle, altered, { recursive: true });
  const doc = JSON.parse(readFileSync(join(altered, 'bundle.json'), 'utf8'));
  doc.models[0].needs.ramBytes = 2;
  writeFileSync(join(altered, 'bundle.json'), `${JSON.stringify(doc, null, 2)}\n`);
  const d = device('device-d', [`${keyPrefix}.pub`]);
  const changedDoc = cli(['models', 'import-bundle', altered, ...d.args]);
  t.equal(changedDoc.code, 1);
  t.match(changedDoc.stderr, /does not verify: it was changed after it was signed/);

  const swapped = join(dir, 'swapped');
  cpSync(bundle, swapped, { recursive: true });
  const evil = Buffer.from(unpinned);
  evil[evil.length - 10] ^= 1;
  writeFileSync(join(swapped, 'models', 'open.gguf'), evil);
  const changedFile = cli(['models', 'import-bundle', swapped, ...d.args]);
  t.equal(changedFile.code, 1);
  t.match(changedFile.stderr, /altered after the bundle was signed; nothing was imported/);
  t.notOk(existsSync(join(d.models, 'open.gguf')), 'the altered model is not in the models dir');
  t.notOk(
    readdirSync(d.models).some((f) => f.includes('partial')),
    'and no partial file is left',
  );

  const unsigned = join(dir, 'unsigned');
  cpSync(bundle, unsigned, { recursive: true });
  writeFileSync(join(unsigned, 'bundle.sig'), '');
  const broken = cli(['models', 'import-bundle', unsigned, ...d.args]);
  t.equal(broken.code, 1);
  t.match(broken.stderr, /bundle.sig is not valid JSON/);
});

t.test("a bundle cannot bring a model the device's manifest does not list, or another file for a pinned one", async (t) => {
  const stranger = standInModel(3);
  const otherManifest = join(dir, 'other-manifest.json');
  writeFileSync(
    otherManifest,
    JSON.stringify({ models: [entry('pinned-chat', 'pinned.gguf', stranger), entry('stranger', 'stranger.gguf', stranger)] }),
  );
  const staging = join(dir, 'staging');
  mkdirSync(join(staging, 'models'), { recursive: true });
  writeFileSync(join(staging, 'models', 'pinned.gguf'), stranger);
  writeFileSync(join(staging, 'models', 'stranger.gguf'), stranger);
  const stagingArgs = ['--data-dir', staging, '--models-dir', join(staging, 'models'), '--manifest', otherManifest];
  const both = join(dir, 'both');
  t.equal(cli(['models', 'bundle', '--out', both, '--key', `${keyPrefix}.key`, ...stagingArgs]).code, 0);
  const d = device('device-e', [`${keyPrefix}.pub`]);
  const r = cli(['models', 'import-bundle', both, ...d.args]);
  t.equal(r.code, 1);
  t.match(r.stderr, /is not the file this device's manifest names/);
  const onlyStranger = join(dir, 'only-stranger');
  cli(['models', 'bundle', '--out', onlyStranger, '--key', `${keyPrefix}.key`, '--id', 'stranger', ...stagingArgs]);
  const r2 = cli(['models', 'import-bundle', onlyStranger, ...d.args]);
  t.equal(r2.code, 1);
  t.match(r2.stderr, /'stranger', which this device's manifest does not list; nothing was imported/);
});
