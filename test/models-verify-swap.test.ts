// The checksum cache ties a checksum to the file whose bytes were read. A model path that is a symlink can be pointed
// at another file between the stat and the read and back before the second stat: the cache must not then record the
// first file's identity with the other file's checksum (which every later start would trust without reading a byte).
// A FIFO put in a model's place must not hold the hash (and the scan behind it) for ever.
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import fs, { closeSync, constants, openSync, renameSync, symlinkSync, writeFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import { join } from 'node:path';
import t from 'tap';
import { ModelVerifier } from '../daemon/models/verify.js';
import { openStore } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';

const dir = tempDir(t);
const store = openStore(join(dir, 'data'));
t.teardown(() => store.close());
const verifier = new ModelVerifier(store);
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

const good = Buffer.alloc(64 * 1024, 1);
const bad = Buffer.alloc(64 * 1024, 2);
writeFileSync(join(dir, 'good'), good);
writeFileSync(join(dir, 'bad'), bad);
const link = join(dir, 'model.gguf');
const point = (target: string) => {
  symlinkSync(join(dir, target), `${link}.tmp`);
  renameSync(`${link}.tmp`, link);
};
point('bad');

t.test('a symlink swapped during the hash does not poison the cache', async (t) => {
  // Deterministic race: each time the verifier stats the path, the "attacker" moves the symlink right after the first
  // stat (so the read sees the good file) and right before the second (so it sees the bad file's identity again).
  const realStatSync = fs.statSync;
  let calls = 0;
  (fs as { statSync: unknown }).statSync = (path: fs.PathLike, options?: fs.StatSyncOptions) => {
    if (path === link && options?.bigint) {
      calls++;
      if (calls === 1) {
        const s = realStatSync(path, options);
        point('good');
        return s;
      }
      if (calls === 2) point('bad');
    }
    return realStatSync(path, options);
  };
  syncBuiltinESMExports();
  try {
    await verifier.sha256(link);
  } finally {
    (fs as { statSync: unknown }).statSync = realStatSync;
    syncBuiltinESMExports();
  }
  point('bad');
  const again = await verifier.sha256(link);
  t.equal(again.sha256, sha(bad), 'the checksum is the one of the file the path names');
  t.not(again.sha256, sha(good), 'never the good file checksum recorded under the bad file');
});

t.test('a FIFO in the model file place is refused at once', async (t) => {
  const fifo = join(dir, 'fifo.gguf');
  t.equal(spawnSync('mkfifo', [fifo]).status, 0);
  const outcome = await Promise.race([
    verifier.sha256(fifo).then(
      () => 'hashed',
      (err: Error) => `refused: ${err.message}`,
    ),
    new Promise((r) => setTimeout(() => r('still waiting after 3 s'), 3000).unref()),
  ]);
  // Lets a read still blocked in open() go, so that the test process can end.
  try {
    closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
  } catch {
    // No reader: nothing waits on it.
  }
  t.match(outcome, /^refused: .*not a regular file/);
});
