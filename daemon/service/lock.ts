// One daemon per data directory: the audit log numbers its leaves in memory, so two daemons appending to the same
// log would give two calls one leaf. A lock file holds the owner's pid; a lock left by a process that is gone (a
// kill -9, a power cut) is taken over.
import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Takes the data directory's daemon lock; returns its release. Throws if a live daemon holds it. */
export function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, 'daemon.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(file, 'wx', 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return () => rmSync(file, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = Number(readFileSync(file, 'utf8').trim());
      if (Number.isInteger(owner) && owner > 0 && owner !== process.pid && alive(owner)) {
        throw new Error(`another sovereign daemon (pid ${owner}) is serving from ${dataDir}; stop it first, or use another --data-dir`);
      }
      rmSync(file, { force: true }); // left by a daemon that is gone
    }
  }
  throw new Error(`cannot take the lock ${file}`);
}

/** The pid of the live daemon serving from `dataDir`, or null when none does. */
export function daemonServing(dataDir: string): number | null {
  let owner: number;
  try {
    owner = Number(readFileSync(join(dataDir, 'daemon.lock'), 'utf8').trim());
  } catch {
    return null;
  }
  return Number.isInteger(owner) && owner > 0 && owner !== process.pid && alive(owner) ? owner : null;
}
