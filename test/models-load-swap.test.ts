// A model loaded on demand is loaded from the file that was verified, not from whatever its path names a moment
// later. Each model's path here is a symlink that another process points, as fast as it can, at the verified file and
// at another model (another embedding width, so the vectors say which file the engine loaded): a call may be refused
// (the file changed) but never answered by the other file.
import { spawn } from 'node:child_process';
import { mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { writeTinyGguf } from './fixtures/gguf.js';
import { entry } from './fixtures/models.js';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';

const MODELS = 10;
const dir = tempDir(t);
const models = join(dir, 'models');
const spare = join(dir, 'spare');
mkdirSync(models);
mkdirSync(spare);
const bad = join(spare, 'narrow.gguf');
writeTinyGguf(bad, { seed: 99, embedding: 16, heads: 2, name: 'tiny-embed' });
const ids = Array.from({ length: MODELS }, (_, i) => `embed-${i}`);
const manifestModels = ids.map((id, i) => {
  const good = join(spare, `${id}.gguf`);
  const written = writeTinyGguf(good, { seed: 10 + i, embedding: 32, heads: 2, name: 'tiny-embed' });
  symlinkSync(good, join(models, `${id}.gguf`));
  return entry(id, `${id}.gguf`, 'embeddings', written);
});
const manifest = join(dir, 'manifest.json');
writeFileSync(manifest, JSON.stringify({ models: manifestModels }));
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(config, JSON.stringify({ dataDir, modelsDir: models, manifest, models: { load: 'on-demand', rescanSeconds: 0 } }));
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--config', config]);
const headers = { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' };

async function listed(): Promise<string[]> {
  const body = (await (await fetch(`${daemon.baseURL}/models`, { headers })).json()) as { data: Array<{ id: string }> };
  return body.data.map((m) => m.id);
}
for (const end = Date.now() + 30_000; (await listed()).length < MODELS;) {
  if (Date.now() > end) throw new Error(`not every model was listed: ${JSON.stringify(await listed())}`);
  await new Promise((r) => setTimeout(r, 200));
}

/** The vector width of the first answer (503 model_not_ready is retried), or the error status. */
async function embed(model: string): Promise<{ status: number; width?: number }> {
  for (const end = Date.now() + 30_000; ;) {
    const res = await fetch(`${daemon.baseURL}/embeddings`, { method: 'POST', headers, body: JSON.stringify({ model, input: 'hello' }) });
    const body = (await res.json()) as { data?: Array<{ embedding: number[] }> };
    if (res.status === 200) return { status: 200, width: body.data![0].embedding.length };
    if (res.status !== 503 || Date.now() > end) return { status: res.status };
    await new Promise((r) => setTimeout(r, 100));
  }
}

t.test('a symlink flipped during the on-demand load never serves the other file', async (t) => {
  const links = ids.map((id) => join(models, `${id}.gguf`));
  const goods = ids.map((id) => join(spare, `${id}.gguf`));
  // Bounded: stops by itself after 4 s, and is killed when the calls are over.
  const flipper = spawn(
    process.execPath,
    [
      '-e',
      `const fs = require('node:fs');
       const [links, goods, bad] = JSON.parse(process.argv[1]);
       const end = Date.now() + 4000;
       for (let n = 0; Date.now() < end; n++) {
         for (let i = 0; i < links.length; i++) {
           try { fs.symlinkSync(n % 2 ? bad : goods[i], links[i] + '.tmp'); fs.renameSync(links[i] + '.tmp', links[i]); } catch {}
         }
       }`,
      JSON.stringify([links, goods, bad]),
    ],
    { stdio: 'ignore' },
  );
  const exited = new Promise((r) => flipper.once('exit', r));
  await new Promise((r) => setTimeout(r, 300));
  const results = await Promise.all(ids.map((id) => embed(id)));
  flipper.kill();
  await exited;
  for (const [i, id] of ids.entries()) {
    t.not(results[i].width, 16, `${id}: never answered by the file swapped in (${JSON.stringify(results[i])})`);
  }
  t.ok(
    results.every((r) => r.status === 200 || r.status === 404),
    `each call is answered by the verified file or refused: ${JSON.stringify(results)}`,
  );
  // The daemon is still up and answering.
  t.equal((await fetch(`${daemon.baseURL}/models`, { headers })).status, 200);
  // Leave the links as they were verified, for the daemon's stop.
  for (const [i, link] of links.entries()) {
    rmSync(`${link}.tmp`, { force: true });
    symlinkSync(goods[i], `${link}.tmp`);
    renameSync(`${link}.tmp`, link);
  }
});
