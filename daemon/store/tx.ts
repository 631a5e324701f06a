// One atomic change of the state every replica shares (projects, keys, accounts, sessions, usage). A module writes
// that state only through `Store.update(fn)`: `fn` reads and writes through the `Tx` it is given, synchronously, and
// the store makes its writes happen all or none. On lmdb that is one write transaction. With PostgreSQL (postgres.ts)
// the reads come from this replica's copy, the writes are committed in PostgreSQL first (refused if anything read has
// changed since, then `fn` runs again on the newer copy) and reach every replica's copy from there.
import type { Database, Key, RootDatabase } from 'lmdb';

/** Counters a change adds to a record (usage): summed with whatever the record holds when the change commits. */
export type Counts = Record<string, number>;

export interface RangeOptions {
  start?: Key;
  end?: Key;
  reverse?: boolean;
}

export interface Tx {
  get<V>(db: string, key: Key): V | undefined;
  /**
   * Entries of a range as this replica holds them. Unlike `get`, a range read is not checked at commit: a change
   * that must not race with another reads one record both write (as the keys' version counter is).
   */
  range<V>(db: string, options?: RangeOptions): Iterable<{ key: Key; value: V }>;
  put(db: string, key: Key, value: unknown): void;
  remove(db: string, key: Key): void;
  /** Adds `counts` field by field to the record at `key` (absent: zeros); never conflicts with another change. */
  add(db: string, key: Key, counts: Counts): void;
}

export function addCounts<T extends object>(into: T | undefined, counts: Counts): T {
  const next = { ...(into ?? {}) } as Record<string, unknown>;
  for (const [field, n] of Object.entries(counts)) next[field] = ((next[field] as number | undefined) ?? 0) + n;
  return next as T;
}

/**
 * Changes on lmdb, made in the order asked. The changes asked for in one turn of the event loop are made together,
 * each in a child transaction of one write transaction (a change that throws is undone alone), and committed at once:
 * one flush to disk for all of them instead of one each, which the event loop would wait for in turn. Each resolves
 * once that commit is on disk; if it fails (a full disk), all of them reject with its error.
 */
export class LmdbCommits {
  private queue: Array<{ run: (tx: Tx) => void; settle: (err: unknown) => void }> = [];
  private readonly tx: Tx;

  constructor(
    private readonly root: RootDatabase,
    db: (name: string) => Database<unknown, Key>,
  ) {
    this.tx = lmdbTx(db);
  }

  add<T>(fn: (tx: Tx) => T, local?: (result: T) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let result: T;
      let failure: { err: unknown } | null = null;
      this.queue.push({
        run: (tx) => {
          try {
            result = this.root.transactionSync(() => {
              const value = fn(tx);
              local?.(value);
              return value;
            });
          } catch (err) {
            failure = { err };
          }
        },
        settle: (commitError) => {
          const err = commitError ?? failure?.err;
          if (err !== undefined) reject(err instanceof Error ? err : new Error(`a change failed: ${JSON.stringify(err)}`));
          else resolve(result);
        },
      });
      if (this.queue.length === 1) setImmediate(() => this.flush());
    });
  }

  private flush(): void {
    const batch = this.queue;
    this.queue = [];
    let commitError: unknown;
    try {
      this.root.transactionSync(() => {
        for (const change of batch) change.run(this.tx);
      });
    } catch (err) {
      commitError = err;
    }
    for (const change of batch) change.settle(commitError);
  }
}

function lmdbTx(db: (name: string) => Database<unknown, Key>): Tx {
  return {
    get: <V>(name: string, key: Key) => db(name).get(key) as V | undefined,
    range: <V>(name: string, options: RangeOptions = {}) =>
      // Materialised: `fn` may remove what it walks.
      Array.from(db(name).getRange(options)) as unknown as Iterable<{ key: Key; value: V }>,
    put: (name, key, value) => void db(name).putSync(key, value),
    remove: (name, key) => void db(name).removeSync(key),
    add: (name, key, counts) => void db(name).putSync(key, addCounts(db(name).get(key) as object | undefined, counts)),
  };
}
