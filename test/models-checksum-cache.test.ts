// The checksum cache cannot be fooled by putting a file's mtime back: a byte changed in place (same inode, same size)
// with `touch -r` restoring the mtime is rehashed, because the change time is part of the cache key.
import { spawnSync } from 'node:child_process';
import { closeSync, openSync, readSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { makeModelFixtures } from './fixtures/models.js';
import { cli, tempDir } from './helpers/daemon.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const args = ['--data-dir', join(dir, 'data'), ...fixtures.args];
const state = () => cli(['models', 'list', '--json', ...args]).json.find((m: { id: string }) => m.id === 'tiny-chat');

t.test('a byte flipped in place with the mtime put back is checksum_mismatch', async (t) => {
  t.match(state(), { state: 'available', verified: true }, 'hashed once and cached');
  const model = join(fixtures.modelsDir, 'tiny-chat.gguf');
  const stamp = join(dir, 'stamp');
  const before = statSync(model, { bigint: true });
  t.equal(spawnSync('touch', ['-r', model, stamp]).status, 0);

  // In a tensor's data, far from the header, so only the checksum can notice.
  const fd = openSync(model, 'r+');
  const at = Number(before.size) - 1000;
  const byte = Buffer.alloc(1);
  readSync(fd, byte, 0, 1, at);
  byte[0] ^= 0x55;
  writeSync(fd, byte, 0, 1, at);
  closeSync(fd);
  t.equal(spawnSync('touch', ['-r', stamp, model]).status, 0);

  const after = statSync(model, { bigint: true });
  t.equal(after.mtimeNs, before.mtimeNs, 'the mtime is back to the nanosecond');
  t.equal(after.ino, before.ino, 'same inode');
  t.equal(after.size, before.size, 'same size');
  t.match(state(), { state: 'checksum_mismatch', verified: false, listed: false, reason: /does not match the expected/ });
});
