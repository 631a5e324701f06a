// `sovereign probe`, `sovereign models list` and `sovereign models import`, run as an operator runs them.
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { writeTinyGguf } from './fixtures/gguf.js';
import { makeModelFixtures } from './fixtures/models.js';
import { cli, tempDir } from './helpers/daemon.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = join(dir, 'data');

t.test('probe reports what the daemon sees', async (t) => {
  const r = cli(['probe', '--json', '--data-dir', dataDir]);
  t.equal(r.code, 0, r.stderr);
  t.ok(r.json.ram.totalBytes > 1024 ** 3);
  t.ok(r.json.ram.availableBytes > 0 && r.json.ram.availableBytes <= r.json.ram.totalBytes);
  t.equal(r.json.cpu.cores, cpus().length);
  t.equal(r.json.inferenceThreads, cpus().length, 'inference threads follow the real core count');
  t.type(r.json.gpus, Array);
  t.match(cli(['probe', '--data-dir', dataDir]).stdout, /RAM .* total/);
});

t.test('models list says what is listed and why the rest is not', async (t) => {
  const r = cli(['models', 'list', '--json', '--data-dir', dataDir, ...fixtures.args]);
  t.equal(r.code, 0, r.stderr);
  const byId = Object.fromEntries(r.json.map((m: { id: string }) => [m.id, m]));
  t.match(byId['tiny-chat'], { present: true, verified: true, fits: true, listed: true, state: 'available' });
  t.match(byId['tiny-embed'], { listed: true });
  t.match(byId['tampered-chat'], { present: true, verified: false, listed: false, state: 'checksum_mismatch' });
  t.match(byId['huge-chat'], { verified: true, fits: false, listed: false, state: 'does_not_fit', reason: /needs .* GiB/ });
  t.match(byId['absent-chat'], { present: false, listed: false, state: 'missing', reason: /models import/ });
  t.match(byId['truncated-chat'], { listed: false, state: 'unreadable', reason: /truncated/ });
  const text = cli(['models', 'list', '--data-dir', dataDir, ...fixtures.args]).stdout;
  t.match(text, /tampered-chat .*checksum_mismatch/);
});

t.test('models import verifies against the manifest and copies atomically', async (t) => {
  const target = join(dir, 'target-models');
  const args = ['--data-dir', join(dir, 'data2'), '--models-dir', target, '--manifest', fixtures.manifest];
  const source = join(dir, 'downloaded-model.gguf');
  copyFileSync(join(fixtures.modelsDir, 'tiny-chat.gguf'), source);

  const named = cli(['models', 'import', source, '--id', 'tiny-chat', '--json', ...args]);
  t.equal(named.code, 0, named.stderr);
  t.match(named.json, { id: 'tiny-chat', file: 'tiny-chat.gguf', pinned: false });
  t.same(readFileSync(join(target, 'tiny-chat.gguf')), readFileSync(source), 'copied byte for byte');

  copyFileSync(join(fixtures.modelsDir, 'tiny-embed.gguf'), join(dir, 'tiny-embed.gguf'));
  const byName = cli(['models', 'import', join(dir, 'tiny-embed.gguf'), '--json', ...args]);
  t.equal(byName.code, 0, byName.stderr);
  t.equal(byName.json.id, 'tiny-embed', 'identified by its file name');

  const bad = readFileSync(source);
  bad[bad.length - 10] ^= 1;
  writeFileSync(join(dir, 'bad.gguf'), bad);
  const tampered = cli(['models', 'import', join(dir, 'bad.gguf'), '--id', 'tiny-chat', ...args]);
  t.equal(tampered.code, 1);
  t.match(tampered.stderr, /SHA-256 .* nothing was imported/);
  t.same(readFileSync(join(target, 'tiny-chat.gguf')), readFileSync(source), 'the good copy is untouched');

  writeFileSync(join(dir, 'short.gguf'), bad.subarray(0, 1000));
  const short = cli(['models', 'import', join(dir, 'short.gguf'), '--id', 'tiny-chat', ...args]);
  t.equal(short.code, 1);
  t.match(short.stderr, /is 1000 bytes; the manifest says/);

  const unknown = cli(['models', 'import', join(dir, 'short.gguf'), ...args]);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /pass --id ID/);
  t.equal(cli(['models', 'import', join(dir, 'nope.gguf'), '--id', 'tiny-chat', ...args]).code, 1);
  t.same(readdirSync(target).sort(), ['tiny-chat.gguf', 'tiny-embed.gguf'], 'no partial files left behind');
});

t.test('an entry without a published checksum is pinned by its first import, and held to it', async (t) => {
  const manifest = JSON.parse(readFileSync(fixtures.manifest, 'utf8'));
  manifest.models = [{ ...manifest.models[0], id: 'operator-chat', file: 'operator-chat.gguf', sha256: null, size: null }];
  const path = join(dir, 'unpinned-manifest.json');
  writeFileSync(path, JSON.stringify(manifest));
  const args = ['--data-dir', join(dir, 'data3'), '--models-dir', join(dir, 'models3'), '--manifest', path];

  const before = cli(['models', 'list', '--json', ...args]);
  t.equal(before.json[0].state, 'missing');
  const model = join(dir, 'operator-chat.gguf');
  writeTinyGguf(model, { seed: 99 });
  const imported = cli(['models', 'import', model, '--json', ...args]);
  t.equal(imported.code, 0, imported.stderr);
  t.equal(imported.json.pinned, true);
  const after = cli(['models', 'list', '--json', ...args]);
  t.match(after.json[0], { state: 'available', verified: true });

  writeTinyGguf(model, { seed: 100 });
  const other = cli(['models', 'import', model, '--json', ...args]);
  t.equal(other.code, 1, 'a different file for a pinned entry is refused');
  t.match(other.json.error.message, /was imported before with SHA-256/);
});

t.test('--help', async (t) => {
  t.match(cli(['models', '--help']).stdout, /Usage: sovereign models/);
  t.match(cli(['probe', '--help']).stdout, /Usage: sovereign probe/);
});
