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

/** `fn` in one lmdb write transaction, across every named database of `root`. */
export function lmdbUpdate<T>(
  root: RootDatabase,
  db: (name: string) => Database<unknown, Key>,
  fn: (tx: Tx) => T,
  local?: (result: T) => void,
): T {
  const tx: Tx = {
    get: <V>(name: string, key: Key) => db(name).get(key) as V | undefined,
    range: <V>(name: string, options: RangeOptions = {}) =>
      // Materialised: `fn` may remove what it walks.
      Array.from(db(name).getRange(options)) as unknown as Iterable<{ key: Key; value: V }>,
    put: (name, key, value) => void db(name).putSync(key, value),
    remove: (name, key) => void db(name).removeSync(key),
    add: (name, key, counts) => void db(name).putSync(key, addCounts(db(name).get(key) as object | undefined, counts)),
  };
  return root.transactionSync(() => {
    const result = fn(tx);
    local?.(result);
    return result;
  });
}
