// A small file system for tests of a full disk: a tmpfs of a given size, mounted in a mount namespace of its own
// that a holder process keeps (`unshare --mount`). Nothing is mounted on the machine itself, and the mount goes with
// the holder: at teardown, or when the test process dies (the holder reads its stdin until it closes). Programs run
// in the namespace through nsenter (`enter`); the test reads and writes the same directory through the holder's
// /proc/<pid>/root (`here`).
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, writeSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { tempDir } from './daemon.js';

export interface SmallDisk {
  /** Its mount point, as programs in the namespace name it. */
  path: string;
  /** The same directory as this process reaches it. */
  here: string;
  /** The command prefix that runs a program in the namespace (it execs the program: the pid stays the program's). */
  enter: string[];
}

/** Why a small disk cannot be made here (not root, no unshare), or null if it can. */
export function smallDiskUnavailable(): string | null {
  const r = spawnSync('unshare', ['--mount', 'sh', '-c', 'mount -t tmpfs -o size=64k tmpfs /mnt'], { encoding: 'utf8' });
  return r.status === 0
    ? null
    : `cannot mount a tmpfs in a mount namespace here (needs root): ${(r.stderr || r.error?.message || '').trim()}`;
}

export async function smallDisk(t: { teardown: (fn: () => void | Promise<void>) => void }, bytes: number): Promise<SmallDisk> {
  const path = tempDir(t, 'sov-disk-');
  const holder = spawn(
    'unshare',
    [
      '--mount',
      '--propagation',
      'private',
      'sh',
      '-c',
      'mount -t tmpfs -o "size=$1,mode=0700" tmpfs "$0" && echo mounted && exec cat',
      path,
      String(bytes),
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const exited = new Promise<void>((resolve) => holder.once('exit', () => resolve()));
  t.teardown(async () => {
    holder.stdin.end();
    const gone = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 2000))]);
    if (!gone) holder.kill('SIGKILL');
    await exited;
  });
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: holder.stdout }).once('line', (line) => (line === 'mounted' ? resolve() : reject(new Error(line))));
    void exited.then(() => reject(new Error('the small disk could not be mounted')));
  });
  return { path, here: `/proc/${holder.pid}/root${path}`, enter: ['nsenter', `--target=${holder.pid}`, '--mount', '--'] };
}

/** Fills the disk holding `dir` with `dir`/filler until a write fails for want of space. */
export function fill(dir: string): void {
  const fd = openSync(`${dir}/filler`, 'a');
  try {
    // Ever smaller pieces: the last one fills the last page.
    for (const size of [1 << 20, 1 << 12, 1]) {
      const piece = Buffer.alloc(size, 0x2e);
      for (;;) {
        try {
          if (writeSync(fd, piece) < size) break;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
          break;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
}
