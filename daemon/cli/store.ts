// The store a CLI command works on: the data directory's lmdb, and with `store: "postgres"` the shared state in
// PostgreSQL (its copy here brought up to date first, its changes committed there).
import type { Config } from '../config/index.js';
import { daemonServing } from '../service/lock.js';
import { connectShared, openStore, type Store } from '../store/index.js';

export async function openConfiguredStore(config: Config): Promise<Store> {
  const store = openStore(config.dataDir);
  try {
    await connectShared(
      store,
      { store: config.store, ...(config.postgres ? { postgres: config.postgres } : {}) },
      // Beside a running daemon, the daemon keeps the copy: it alone tells its in-memory indexes what changed.
      { serving: false, daemonRunning: daemonServing(config.dataDir) !== null },
    );
  } catch (err) {
    await store.close();
    throw err;
  }
  return store;
}
