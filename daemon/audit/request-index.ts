// The log's index by request id: request id → the newest leaf logged for it, in lmdb, so a lookup (the dashboard's
// "find a call by its X-Request-Id") reads one key instead of scanning the log. It is written with the entries, in
// the lmdb batches that already commit them (log.ts), never on a call's path. A marker says how many leaves it
// covers; a start catches up from there (after a crash replay, or on a log older than the index).
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';

/** The marker's key: request ids are the daemon's own (`req_` and hex), so no id is this. */
const COVERED = '#covered';
/**
 * The daemon's request ids (http/server.ts), the only ones a lookup accepts. Nothing else is indexed: an entry that
 * names another (a damaged outbox event, say) could name one longer than lmdb's largest key (1978 bytes), whose write
 * would fail the entries' whole batch and stop the log, at every start again.
 */
const REQUEST_ID = /^req_[0-9a-f]{32}$/;

export function isRequestId(id: string): boolean {
  return REQUEST_ID.test(id);
}
/** Entries indexed per lmdb transaction while catching up, so a long catch-up does not hold one huge transaction. */
const CATCH_UP_SLICE = 20_000;

/** The request id an entry names, if any (entries of kinds without one, such as a boot, have none). */
export function requestIdOf(bytes: Buffer): string | null {
  try {
    const id = (JSON.parse(bytes.toString('utf8')) as { request_id?: unknown }).request_id;
    return typeof id === 'string' && isRequestId(id) ? id : null;
  } catch {
    return null;
  }
}

/** The bytes every entry for `requestId` holds (canonical JSON writes the field exactly so). */
export function requestIdNeedle(requestId: string): Buffer {
  return Buffer.from(`"request_id":${JSON.stringify(requestId)}`);
}

export class RequestIndex {
  private readonly db: Database<number, string>;

  constructor(store: Store) {
    this.db = store.db<number, string>('audit-request-ids');
  }

  /** The newest leaf indexed for `requestId`, if any. */
  get(requestId: string): number | undefined {
    return isRequestId(requestId) ? this.db.get(requestId) : undefined;
  }

  /** Queues the writes for leaves [.., end) into the current lmdb batch: each id's leaf, then the marker. */
  put(ids: Array<[requestId: string, leaf: number]>, end: number): Array<Promise<boolean>> {
    const writes = ids.filter(([id]) => isRequestId(id)).map(([id, leaf]) => this.db.put(id, leaf));
    writes.push(this.db.put(COVERED, end));
    return writes;
  }

  /**
   * Indexes the entries from where the index stops up to `size`, synchronously (at a start, before any append). An
   * index that covers more than `size` (the log's tail was cut off after a hole) is taken to cover `size`: its keys
   * for the leaves cut off are checked against the entry on every lookup.
   */
  catchUp(size: number, entry: (leaf: number) => Buffer | undefined): number {
    const covered = Math.min(this.db.get(COVERED) ?? 0, size);
    for (let from = covered; from < size; from += CATCH_UP_SLICE) {
      const to = Math.min(size, from + CATCH_UP_SLICE);
      this.db.transactionSync(() => {
        for (let leaf = from; leaf < to; leaf++) {
          const bytes = entry(leaf);
          const id = bytes ? requestIdOf(bytes) : null;
          if (id !== null) this.db.putSync(id, leaf);
        }
        this.db.putSync(COVERED, to);
      });
    }
    if (this.db.get(COVERED) !== size) this.db.putSync(COVERED, size);
    return size - covered;
  }
}
