// The append-only audit log in lmdb: each entry as canonical JSON under its leaf index, and the hash of every
// complete subtree above the leaves (level ≥ 1, index), so tree heads and proofs take O(log n) lookups (a leaf's own
// hash is recomputed from its entry). An append writes the entry and the subtrees it completes in one transaction;
// every append made in the same event turn shares that transaction and its flush (group commit), so concurrent
// calls do not queue on fsync one by one. The size is the number of entries: they are written in order.
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';
import { canonicalJson, type Canonical } from './canonical.js';
import { consistencyProof, inclusionProof, leafHash, nodeHash, treeHead, type Hash, type SubtreeHash } from './merkle.js';

/** Subtree keys: level × 2^40 + index (a log of up to a trillion entries, keys exact in a double). */
const LEVEL_STRIDE = 2 ** 40;

export class AuditLog {
  private readonly entries: Database<Buffer, number>;
  private readonly nodes: Database<Buffer, number>;
  /** Leaves assigned so far (some may still be committing). */
  private assigned: number;
  /** Leaves committed and flushed: what proofs and checkpoints may cover. */
  private durable: number;
  /** Right edge of the tree: the complete subtree at each level still waiting for its right sibling. */
  private readonly pending = new Map<number, Hash>();
  /** Resolves when every append so far is durable; rejects if one failed. Appends chain on it, in order. */
  private tail: Promise<void> = Promise.resolve();
  /** Set by the first failed write: the in-memory tree no longer matches the disk, so nothing more is appended. */
  private failure: Error | null = null;

  constructor(private readonly store: Store) {
    this.entries = store.bytes('audit-entries');
    this.nodes = store.bytes('audit-nodes');
    const size = this.repairTail();
    this.assigned = this.durable = size;
    for (let level = 0; 2 ** level <= this.assigned; level++) {
      if (Math.floor(this.assigned / 2 ** level) % 2 === 1) {
        this.pending.set(level, this.subtree(level, Math.floor(this.assigned / 2 ** level) - 1));
      }
    }
  }

  /** Leaves committed to disk. */
  get size(): number {
    return this.durable;
  }

  /**
   * Appends an entry; resolves with its leaf index once the entry is committed and flushed to disk. The index is
   * taken synchronously, so entries appear in the order append was called.
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
    // An entry counts as durable only once every entry before it is: if an earlier write failed, this call fails
    // too, even if its own batch committed, so no response ever names a leaf that follows a hole.
    const written = Promise.all(writes).then(() => this.store.flushed());
    const done = this.tail.then(() => written);
    this.tail = done;
    try {
      await done;
    } catch (err) {
      this.failure ??= err as Error;
      throw err;
    }
    this.durable = index + 1;
    return index;
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
    return index < this.durable ? this.entries.get(index) : undefined;
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
