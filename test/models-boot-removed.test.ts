// A model file removed after it was verified at boot, while the daemon still verifies the next ones, is that model's
// problem only: the others are listed and served (before, listing it threw and no model at all was served).
import { createHash } from 'node:crypto';
import { closeSync, mkdirSync, openSync, ftruncateSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeTinyGguf } from './fixtures/gguf.js';
import { entry } from './fixtures/models.js';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';

const dir = tempDir(t);
const models = join(dir, 'models');
mkdirSync(models);
const first = writeTinyGguf(join(models, 'first.gguf'), { seed: 1 });
const last = writeTinyGguf(join(models, 'last.gguf'), { seed: 2 });
// A large sparse file (no disk used) whose hashing keeps the boot busy long enough to remove the first one meanwhile.
const SLOW = 768 * 1024 * 1024;
const fd = openSync(join(models, 'slow.gguf'), 'w');
ftruncateSync(fd, SLOW);
closeSync(fd);
const zeros = Buffer.alloc(16 * 1024 * 1024);
const hash = createHash('sha256');
for (let done = 0; done < SLOW; done += zeros.length) hash.update(zeros);
const slow = { ...first, size: SLOW, sha256: hash.digest('hex') };

const manifest = join(dir, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({
    models: [
      entry('first-chat', 'first.gguf', 'chat', first),
      entry('slow-chat', 'slow.gguf', 'chat', slow),
      entry('last-chat', 'last.gguf', 'chat', last),
    ],
  }),
);
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(config, JSON.stringify({ dataDir, modelsDir: models, manifest, models: { load: 'on-demand', rescanSeconds: 0 } }));
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--config', config]);
const headers = { authorization: `Bearer ${key.secret}` };
const health = async () =>
  (await (await fetch(`${daemon.baseURL}/health`, { headers })).json()) as {
    models: Array<{ id: string; readiness: string }>;
    unavailable_models: Array<{ id: string; state: string }>;
  };

t.test('a file removed while the next model is verified leaves the other models served', async (t) => {
  // The slow model's first progress line: the first model has been verified by then.
  for (const end = Date.now() + 30_000; !daemon.logs.some((l) => l.includes('"model":"slow-chat"') && l.includes('verifying'));) {
    if (Date.now() > end) throw new Error(`the slow model was never hashed:\n${daemon.logs.join('\n')}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  rmSync(join(models, 'first.gguf'));
  let seen = await health();
  for (const end = Date.now() + 30_000; !seen.unavailable_models.some((m) => m.id === 'slow-chat'); seen = await health()) {
    if (Date.now() > end) throw new Error(`boot never ended: ${JSON.stringify(seen)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  t.notOk(
    daemon.logs.some((l) => l.includes('model boot failed')),
    'the boot did not fail as a whole',
  );
  t.match(
    seen.models.find((m) => m.id === 'last-chat'),
    { readiness: 'unloaded' },
    'the model after it is listed',
  );
  const listed = (await (await fetch(`${daemon.baseURL}/models`, { headers })).json()) as { data: Array<{ id: string }> };
  t.ok(
    listed.data.some((m) => m.id === 'last-chat'),
    '/v1/models lists it',
  );
});
