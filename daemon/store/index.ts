// One lmdb environment under the data dir holds every store (projects, keys, the audit log, documents), each in its
// own named database. lmdb is safe to share between processes, which is what lets the CLI change keys while the
// daemon runs: a write commits durably and the daemon's next read sees it.
//
// Part of it is the state replicas share (SHARED_SPACES): with `store: "postgres"` that part lives in PostgreSQL and
// the lmdb holds this replica's copy of it (postgres/state.ts); either way it is changed only through `update`.
import { chmodSync, existsSync, mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { open, type Database, type Key, type RootDatabase } from 'lmdb';
import { PostgresState, type LocalCopy, type PostgresOptions } from './postgres/state.js';
import { LmdbCommits, type Tx } from './tx.js';
import { probeDirectory, WriteHealth } from './writes.js';

export { addCounts, type Counts, type Tx } from './tx.js';
export { connectionConfig, SharedStateUnavailable, STALE_MS, type PostgresOptions } from './postgres/state.js';
export { migrate, schemaProblem, schemaVersion, SCHEMA_VERSION, MIGRATIONS } from './postgres/migrations.js';

/** The named databases every replica shares: written only through `Store.update`. */
export const SHARED_SPACES: ReadonlySet<string> = new Set([
  'projects',
  'keys',
  'versions',
  'users',
  'sessions',
  'usage',
  'usage-daily',
  'key-last-used',
  // Marks of usage flushes (daemon/usage/index.ts), so that one whose commit's outcome was lost is not added twice.
  'usage-flushes',
  'documents',
  'document-chunks',
  'documents-by-kb',
  'documents-meta',
  'document-vectors',
  'document-graphs',
  'responses',
  'response-items',
  'responses-expiry',
  // Each replica's newest audit checkpoint, by its log's origin (daemon/audit/anchors.ts); the logs stay per replica.
  'audit-anchors',
  'files',
  'files-by-project',
  'file-lines',
  'files-loose',
  'batches',
  'batches-by-project',
  'batches-active',
  'batch-lines',
  'batch-leases',
  // The operator's marks on the first-run checklist (daemon/dashboard/checklist.ts): one checklist per deployment.
  'operator-checklist',
]);
/** Named databases of raw bytes (values are Buffers as they are, not msgpack). */
const BINARY_SPACES: ReadonlySet<string> = new Set(['document-vectors']);

/** A shared record another process changed (a replica, the CLI), once this replica's copy holds the change. */
export interface SharedChange {
  space: string;
  key: Key;
  /** The record now; undefined once removed. */
  value: unknown;
  /** The record before, as this copy held it. */
  previous: unknown;
}
const WRITES = new Set([
  'put',
  'putSync',
  'remove',
  'removeSync',
  'transaction',
  'transactionSync',
  'ifNoExists',
  'ifVersion',
  'clearSync',
  'clearAsync',
  'drop',
  'dropSync',
]);

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
  /**
   * Changes the shared state (SHARED_SPACES) atomically: `fn` reads and writes through its `Tx`, synchronously, and may
   * run more than once (with PostgreSQL, again on a newer copy when something it read changed meanwhile). Rejects
   * with SharedStateUnavailable when PostgreSQL cannot take the change.
   *
   * `local` writes this machine's own records of the change (the CLI's audit events, daemon/audit/outbox.ts) with its
   * result: on lmdb in the same transaction; with PostgreSQL, in this lmdb right after PostgreSQL committed (a crash
   * in between, a few microseconds, loses them; the change itself is not lost).
   */
  update<T>(fn: (tx: Tx) => T, local?: (result: T) => void): Promise<T>;
  /** The link to PostgreSQL when the shared state lives there; null when this lmdb is the whole state. */
  readonly shared: PostgresState | null;
  /**
   * Calls `listener` with the changes of `space` that other processes made, once they are in this copy: with
   * PostgreSQL, other replicas' changes, so in-memory indexes (documents) follow them. On lmdb nothing calls it.
   */
  onChange(space: string, listener: (changes: SharedChange[]) => void): void;
  /**
   * Brings this copy up to date with PostgreSQL: for a lookup that missed a record another replica may have made a
   * moment ago. Calls made meanwhile share one catch-up. Nothing to do on lmdb.
   */
  refresh(): Promise<void>;
  close(): Promise<void>;
}

export interface SharedStoreOptions {
  store: 'lmdb' | 'postgres';
  postgres?: PostgresOptions;
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
  const raw = (name: string): Database<unknown, Key> => {
    let db = opened.get(name);
    if (!db) {
      db = root.openDB<unknown, string>({ name, compression: false, ...(BINARY_SPACES.has(name) ? { encoding: 'binary' as const } : {}) });
      opened.set(name, db);
    }
    return db;
  };
  const listeners = new Map<string, Array<(changes: SharedChange[]) => void>>();
  const commits = new LmdbCommits(root, raw);
  // With PostgreSQL, a module writing a shared space straight into lmdb would change this replica's copy alone.
  const guarded = new Map<string, Database<unknown, Key>>();
  const readOnly = (name: string): Database<unknown, Key> => {
    let db = guarded.get(name);
    if (!db) {
      // Methods are bound once: authentication reads through here on every call.
      const bound = new Map<PropertyKey, unknown>();
      db = new Proxy(raw(name), {
        get(target, prop, receiver) {
          let method = bound.get(prop);
          if (method !== undefined) return method;
          if (typeof prop === 'string' && WRITES.has(prop)) {
            method = () => {
              throw new Error(`'${name}' is shared state: change it through store.update, not lmdb's ${prop}`);
            };
          } else {
            const value = Reflect.get(target, prop, receiver) as unknown;
            if (typeof value !== 'function') return value;
            method = (value as (...args: unknown[]) => unknown).bind(target);
          }
          bound.set(prop, method);
          return method;
        },
      });
      guarded.set(name, db);
    }
    return db;
  };
  // Both ways the data directory is written: lmdb's file, and files of their own (journal, vectors, images).
  const writes = new WriteHealth(() => {
    store.db<number>('service').putSync('write-probe', Date.now());
    probeDirectory(dataDir);
  });
  const store: Store = {
    writes,
    path,
    db<V, K extends Key = string>(name: string): Database<V, K> {
      const db = store.shared && SHARED_SPACES.has(name) ? readOnly(name) : raw(name);
      return db as unknown as Database<V, K>;
    },
    shared: null,
    update<T>(fn: (tx: Tx) => T, local?: (result: T) => void): Promise<T> {
      if (store.shared) return store.shared.update(fn, local);
      return commits.add(fn, local);
    },
    bytes(name: string): Database<Buffer, number> {
      if (BINARY_SPACES.has(name)) return store.db<Buffer, number>(name);
      let db = opened.get(name);
      if (!db) {
        db = root.openDB<Buffer, number>({ name, compression: false, encoding: 'binary' });
        opened.set(name, db);
      }
      return db as unknown as Database<Buffer, number>;
    },
    refresh: () => store.shared?.refresh() ?? Promise.resolve(),
    onChange(space, listener) {
      listeners.set(space, [...(listeners.get(space) ?? []), listener]);
    },
    async flushed() {
      await root.flushed;
    },
    async close() {
      writes.stop();
      await store.shared?.close();
      await root.close();
    },
  };
  localCopies.set(store, {
    get: (space, key) => raw(space).get(key),
    range: (space, options) => raw(space).getRange(options),
    apply(rows, seq) {
      const changed = new Map<string, SharedChange[]>();
      root.transactionSync(() => {
        for (const row of rows) {
          const db = raw(row.space);
          if (row.theirs && listeners.has(row.space)) {
            let list = changed.get(row.space);
            if (!list) changed.set(row.space, (list = []));
            list.push({ space: row.space, key: row.key, value: row.value, previous: db.get(row.key) });
          }
          if (row.value === undefined) db.removeSync(row.key);
          else db.putSync(row.key, row.value);
        }
        const replication = raw('replication');
        if (seq > ((replication.get('applied') as number | undefined) ?? 0)) replication.putSync('applied', seq);
      });
      for (const [space, changes] of changed) for (const listener of listeners.get(space)!) listener(changes);
    },
    applied: () => (raw('replication').get('applied') as number | undefined) ?? 0,
    clear() {
      root.transactionSync(() => {
        for (const space of SHARED_SPACES) raw(space).clearSync();
        raw('replication').putSync('applied', 0);
      });
    },
    isShared: (space) => SHARED_SPACES.has(space),
  });
  return store;
}

const localCopies = new WeakMap<Store, LocalCopy>();

/**
 * This replica as the shared records it writes name it (a batch's lease, an upload in progress): its host and data
 * directory, the same across its restarts, so a replica that comes back knows its own records at once.
 */
export function replicaOf(store: Store): string {
  return `${hostname()}:${dirname(store.path)}`;
}

/**
 * `find` on this copy, and on a miss (null or undefined) once more after catching up with PostgreSQL: what another
 * replica made a moment ago (a stored response, a document) is found through any replica. On lmdb, `find` once.
 */
export async function findFresh<T>(store: Store, find: () => T): Promise<T> {
  const found = find();
  if ((found !== null && found !== undefined) || !store.shared) return found;
  await store.refresh();
  return find();
}

/**
 * With `store: "postgres"`, links `store` to PostgreSQL, its copy brought up to date first (nothing to do on lmdb).
 * A serving replica (`serving`, which holds the data directory's lock) rebuilds its copy from nothing and follows
 * PostgreSQL from then on; the CLI catches up from where the copy stands and commits its changes there. Throws, with
 * what to do, when PostgreSQL cannot be reached or its schema is not this build's.
 */
export async function connectShared(
  store: Store,
  options: SharedStoreOptions,
  mode: {
    serving: boolean;
    /** The CLI beside a running daemon: the daemon keeps the copy (and its indexes) current; this process only waits for it. */
    daemonRunning?: boolean;
    log?: (level: 'info' | 'warn' | 'error', message: string, detail?: object) => void;
  },
): Promise<void> {
  if (options.store !== 'postgres' || !options.postgres) return;
  const shared = await PostgresState.open(options.postgres, localCopies.get(store)!, mode.log ?? (() => {}), {
    rebuild: mode.serving,
    watch: mode.serving,
    follow: !mode.serving && mode.daemonRunning === true,
  });
  (store as { shared: PostgresState | null }).shared = shared;
}
