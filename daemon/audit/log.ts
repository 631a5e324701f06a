// The append-only audit log in lmdb: each entry as canonical JSON under its leaf index, and the hash of every
// complete subtree above the leaves (level ≥ 1, index), so tree heads and proofs take O(log n) lookups (a leaf's own
// hash is recomputed from its entry). An append writes the entry and the subtrees it completes in one transaction;
// every append made in the same event turn shares that transaction (lmdb batches them). The entry is durable, and
// acknowledged, once the write-ahead journal (journal.ts) has it on disk; lmdb syncs in the background, and a start
// after a crash replays from the journal what lmdb lost. Without a journal (tools that only read), an append waits
// for lmdb's own flush. The size is the number of entries both on disk and readable: they are written in order.
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';
import { canonicalJson, type Canonical } from './canonical.js';
import { AuditJournal, type JournalRecord } from './journal.js';
import { consistencyProof, inclusionProof, leafHash, nodeHash, treeHead, type Hash, type SubtreeHash } from './merkle.js';

/** Subtree keys: level × 2^40 + index (a log of up to a trillion entries, keys exact in a double). */
const LEVEL_STRIDE = 2 ** 40;

export interface AuditLogOptions {
  /** Directory of the write-ahead journal (the data directory); absent: appends wait for lmdb's flush instead. */
  journalDir?: string;
}

export class AuditLog {
  private readonly entries: Database<Buffer, number>;
  private readonly nodes: Database<Buffer, number>;
  private readonly journal: AuditJournal | null = null;
  /** Leaves assigned so far (some may still be committing). */
  private assigned: number;
  /** Leaves on disk and readable from lmdb: what proofs and checkpoints may cover. */
  private durable: number;
  /** Right edge of the tree: the complete subtree at each level still waiting for its right sibling. */
  private readonly pending = new Map<number, Hash>();
  /** Resolves when every append so far is durable and readable; rejects if one failed. Appends chain on it, in order. */
  private tail: Promise<void> = Promise.resolve();
  /** Set by the first failed write: the in-memory tree no longer matches the disk, so nothing more is appended. */
  private failure: Error | null = null;
  /**
   * Entries acknowledged (in the journal) that lmdb does not hold readable yet, for the few milliseconds between: a
   * client that asks for its entry right after its response gets it.
   */
  private readonly acknowledged = new Map<number, Buffer>();

  constructor(
    private readonly store: Store,
    options: AuditLogOptions = {},
  ) {
    this.entries = store.bytes('audit-entries');
    this.nodes = store.bytes('audit-nodes');
    let replayed: { files: string[]; from: number } | null = null;
    if (options.journalDir) {
      const opened = AuditJournal.open(options.journalDir, () => store.flushed());
      this.journal = opened.journal;
      replayed = { files: opened.files, from: this.replay(opened.records) };
    }
    const size = this.repairTail();
    if (replayed && replayed.from < size) this.rebuildNodes(replayed.from, size);
    this.assigned = this.durable = size;
    for (let level = 0; 2 ** level <= this.assigned; level++) {
      if (Math.floor(this.assigned / 2 ** level) % 2 === 1) {
        this.pending.set(level, this.subtree(level, Math.floor(this.assigned / 2 ** level) - 1));
      }
    }
    // The replayed files go once lmdb has their entries on disk; until then a crash replays them again.
    if (replayed?.files.length) {
      const files = replayed.files;
      void store.flushed().then(() => AuditJournal.discard(files));
    }
  }

  /** Puts into lmdb the journal's entries it lacks; returns the lowest index put (Infinity if none). */
  private replay(records: JournalRecord[]): number {
    let from = Infinity;
    for (const record of records) {
      if (this.entries.doesExist(record.index)) continue;
      this.entries.putSync(record.index, record.payload);
      from = Math.min(from, record.index);
    }
    return from;
  }

  /** Recomputes the subtree hashes covering leaves from `from` up to `size` (after a replay). */
  private rebuildNodes(from: number, size: number): void {
    for (let level = 1; 2 ** level <= size; level++) {
      const last = Math.floor(size / 2 ** level);
      for (let i = Math.floor(from / 2 ** level); i < last; i++) {
        const hash = nodeHash(this.subtree(level - 1, 2 * i), this.subtree(level - 1, 2 * i + 1));
        this.nodes.putSync(level * LEVEL_STRIDE + i, hash);
      }
    }
  }

  /** Leaves committed to disk. */
  get size(): number {
    return this.durable;
  }

  /**
   * Appends an entry; resolves with its leaf index once the entry is on disk. The index is taken synchronously, so
   * entries appear in the order append was called.
   */
  async append(entry: Canonical): Promise<number> {
    if (this.failure) throw new Error(`the audit log stopped after a failed write (${this.failure.message}); restart the daemon`);
    const bytes = Buffer.from(canonicalJson(entry));
    const index = this.assigned++;
    let hash = leafHash(bytes);
    const writes: Array<Promise<boolean>> = [this.entries.put(index, bytes)];
    let level = 0;
    for (let i = index; i % 2 === 1; i = (i - 1) / 2) {
      hash = nodeHash(this.pending.get(level)!, hash);
      this.pending.delete(level);
      level++;
      writes.push(this.nodes.put(level * LEVEL_STRIDE + (i - 1) / 2, hash));
    }
    this.pending.set(level, hash);
    const journaled = this.journal?.append(index, bytes);
    const committed = Promise.all(writes);
    // Proofs and checkpoints may cover the entry once it is both on disk and readable, and every entry before it
    // is: a failed write anywhere stops the log.
    const done: Promise<unknown> = this.tail.then((): Promise<unknown> =>
      journaled ? Promise.all([journaled, committed]) : committed.then(() => this.store.flushed()),
    );
    this.tail = done.then(
      () => {
        this.durable = Math.max(this.durable, index + 1);
        this.acknowledged.delete(index);
      },
      (err: Error) => {
        this.failure ??= err;
        throw err;
      },
    );
    this.tail.catch(() => {});
    try {
      // The journal writes in order and refuses everything after a failed write, so an acknowledged entry never
      // follows a lost one.
      await (journaled ?? done);
    } catch (err) {
      this.failure ??= err as Error;
      throw err;
    }
    if (index >= this.durable) this.acknowledged.set(index, bytes);
    return index;
  }

  /** Resolves once every append so far is readable for proofs (or rejects after a failed write). */
  settled(): Promise<void> {
    return this.tail;
  }

  /** Closes the journal after its last batch. */
  async close(): Promise<void> {
    await this.tail.catch(() => {});
    await this.journal?.close();
  }

  /** Why appends stopped, if they did (for health). */
  get problem(): string | null {
    return this.failure ? `the audit log stopped after a failed write: ${this.failure.message}` : null;
  }

  /**
   * The log's size, after dropping whatever follows a hole: a batch that failed to commit while later ones did
   * leaves entries after a missing one. None of those was acknowledged (see append), so they are removed, with the
   * subtrees that cover them.
   */
  private repairTail(): number {
    let last = -1;
    for (const key of this.entries.getKeys({ reverse: true, limit: 1 })) last = key;
    if (last < 0 || (this.entries.getStats() as { entryCount: number }).entryCount === last + 1) return last + 1;
    let size = 0;
    for (const key of this.entries.getKeys()) {
      if (key !== size) break;
      size++;
    }
    for (const key of this.entries.getKeys({ start: size })) this.entries.removeSync(key);
    for (let level = 1; 2 ** level <= last + 1; level++) {
      // A subtree at this level covering any leaf at or past `size` is dropped.
      const first = Math.floor(size / 2 ** level);
      for (const key of this.nodes.getKeys({ start: level * LEVEL_STRIDE + first, end: (level + 1) * LEVEL_STRIDE }))
        this.nodes.removeSync(key);
    }
    return size;
  }

  /** The entry's canonical JSON bytes, or undefined. */
  entry(index: number): Buffer | undefined {
    return index < this.durable ? this.entries.get(index) : this.acknowledged.get(index);
  }

  readonly subtree: SubtreeHash = (level, index) => {
    if (level === 0) {
      const entry = this.entries.get(index);
      if (!entry) throw new Error(`audit log is missing entry ${index}`);
      return leafHash(entry);
    }
    const hash = this.nodes.get(level * LEVEL_STRIDE + index);
    if (!hash) throw new Error(`audit log is missing subtree ${level}/${index}`);
    return Buffer.from(hash);
  };

  root(size = this.durable): Hash {
    this.check(size);
    return treeHead(this.subtree, size);
  }

  inclusion(index: number, size = this.durable): Hash[] {
    this.check(size);
    return inclusionProof(this.subtree, index, size);
  }

  consistency(from: number, to = this.durable): Hash[] {
    this.check(to);
    return consistencyProof(this.subtree, from, to);
  }

  private check(size: number): void {
    if (size > this.durable) throw new RangeError(`the log has ${this.durable} entries, not ${size}`);
  }
}
