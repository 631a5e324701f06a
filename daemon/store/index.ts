// One lmdb environment under the data dir holds every store (projects, keys, and later the audit log and
// documents), each in its own named database. lmdb is safe to share between processes, which is what lets the
// CLI change keys while the daemon runs: a write commits durably and the daemon's next read sees it.
import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';

export interface Store {
  readonly path: string;
  /** A named database inside the environment, created on first use. */
  db<V = unknown>(name: string): Database<V, string>;
  close(): Promise<void>;
}

export function openStore(dataDir: string): Store {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, 'sovereign.mdb');
  let root: RootDatabase;
  try {
    root = open({ path, maxDbs: 32, compression: false });
  } catch (err) {
    throw new Error(`cannot open the state database at ${path}: ${(err as Error).message}`);
  }
  // Key hashes and the audit log are nobody else's business, whatever the umask was.
  for (const file of [dataDir, path, `${path}-lock`]) {
    if (existsSync(file)) chmodSync(file, file === dataDir ? 0o700 : 0o600);
  }
  const opened = new Map<string, Database<unknown, string>>();
  return {
    path,
    db<V>(name: string): Database<V, string> {
      let db = opened.get(name);
      if (!db) {
        db = root.openDB<unknown, string>({ name, compression: false });
        opened.set(name, db);
      }
      return db as Database<V, string>;
    },
    async close() {
      await root.close();
    },
  };
}
