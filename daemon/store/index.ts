// One lmdb environment under the data dir holds every store (projects, keys, and later the audit log and
// documents), each in its own named database. lmdb is safe to share between processes, which is what lets the
// CLI change keys while the daemon runs: a write commits durably and the daemon's next read sees it.
import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type Key, type RootDatabase } from 'lmdb';
import { probeDirectory, WriteHealth } from './writes.js';

export {
  absorbCommitFailures,
  describeWriteFailure,
  probeDirectory,
  shortWriteError,
  writeFailureOf,
  WriteHealth,
  type WriteFailureCode,
} from './writes.js';

export interface Store {
  readonly path: string;
  /** A named database inside the environment, created on first use. */
  db<V = unknown, K extends Key = string>(name: string): Database<V, K>;
  /** A named database of raw bytes under number keys (the audit log), created on first use. */
  bytes(name: string): Database<Buffer, number>;
  /** Resolves when every write so far is committed and flushed to disk. */
  flushed(): Promise<void>;
  /** Whether the data directory takes writes: failures are noted here, and health reads it. */
  readonly writes: WriteHealth;
  close(): Promise<void>;
}

export function openStore(dataDir: string): Store {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, 'sovereign.mdb');
  let root: RootDatabase;
  try {
    // Room for every store's named databases with some to spare (a named database costs nothing until opened).
    root = open({ path, maxDbs: 64, compression: false });
  } catch (err) {
    throw new Error(`cannot open the state database at ${path}: ${(err as Error).message}`);
  }
  // Key hashes and the audit log are nobody else's business, whatever the umask was.
  for (const file of [dataDir, path, `${path}-lock`]) {
    if (existsSync(file)) chmodSync(file, file === dataDir ? 0o700 : 0o600);
  }
  const opened = new Map<string, Database<unknown, Key>>();
  // Both ways the data directory is written: lmdb's file, and files of their own (journal, vectors, images).
  const writes = new WriteHealth(() => {
    store.db<number>('service').putSync('write-probe', Date.now());
    probeDirectory(dataDir);
  });
  const store: Store = {
    writes,
    path,
    db<V, K extends Key = string>(name: string): Database<V, K> {
      let db = opened.get(name);
      if (!db) {
        db = root.openDB<unknown, string>({ name, compression: false });
        opened.set(name, db);
      }
      return db as unknown as Database<V, K>;
    },
    bytes(name: string): Database<Buffer, number> {
      let db = opened.get(name);
      if (!db) {
        db = root.openDB<Buffer, number>({ name, compression: false, encoding: 'binary' });
        opened.set(name, db);
      }
      return db as unknown as Database<Buffer, number>;
    },
    async flushed() {
      await root.flushed;
    },
    async close() {
      writes.stop();
      await root.close();
    },
  };
  return store;
}
