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
  private readonly waiters = new Set<() => void>();

  constructor(private readonly store: Store) {
    this.entries = store.bytes('audit-entries');
    this.nodes = store.bytes('audit-nodes');
    let size = 0;
    for (const key of this.entries.getKeys({ reverse: true, limit: 1 })) size = key + 1;
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
    await Promise.all(writes);
    await this.store.flushed();
    // Commits are in order, so every index below this one is durable too.
    if (index + 1 > this.durable) {
      this.durable = index + 1;
      for (const wake of this.waiters) wake();
    }
    return index;
  }

  /** Resolves when the log has grown past `size` (or immediately if it has). */
  grown(size: number, signal?: AbortSignal): Promise<void> {
    if (this.durable > size) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        if (this.durable > size || signal?.aborted) {
          this.waiters.delete(wake);
          resolve();
        }
      };
      this.waiters.add(wake);
      signal?.addEventListener('abort', wake, { once: true });
    });
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
