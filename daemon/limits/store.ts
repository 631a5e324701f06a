// Where the limits' buckets live. One process: in memory (gcra.ts), the default. Several daemon replicas behind one
// address: in Redis (redis-store.ts), so that they share each key's limits exactly. Either way a decision is one
// atomic step over the buckets of one call: it takes from the key's bucket and its project's (requests, or tokens),
// from both or from neither, and reads the other kind's, so the rate-limit headers of both come from the same instant.
import { Gcra, type Decision } from './gcra.js';

export interface Bucket {
  /** Unique per bucket; starts with the hash tag (`{proj_…}`) that keeps a project's buckets in one Redis slot. */
  name: string;
  /** Units per minute. */
  limit: number;
}

export interface GroupDecision {
  /** Whether every bucket taken from had room: then each was taken from; otherwise none was. */
  allowed: boolean;
  /** The buckets taken from, in the order given. */
  changed: Decision[];
  /** The other buckets, read at the same instant. */
  other: Decision[];
}

export interface LimitStore {
  readonly kind: 'memory' | 'redis';
  /** Takes `cost` from each of `change` if it fits in all, and reads `other`. `now` only for the memory store (tests). */
  consume(change: readonly Bucket[], cost: number, other: readonly Bucket[], now?: number): GroupDecision | Promise<GroupDecision>;
  /** Gives back (negative `delta`) or takes more (positive) after the real cost is known; never refuses. */
  adjust(buckets: readonly Bucket[], delta: number, now?: number): void | Promise<void>;
  /** null while it can decide; otherwise why not (for health). */
  problem(): string | null;
  close(): Promise<void>;
}

export class MemoryLimitStore implements LimitStore {
  readonly kind = 'memory';
  private readonly gcra = new Gcra();

  consume(change: readonly Bucket[], cost: number, other: readonly Bucket[], now = Date.now()): GroupDecision {
    const { allowed, decisions } = this.gcra.consumeAll(change, cost, now);
    return { allowed, changed: decisions, other: other.map((b) => this.gcra.peek(b.name, b.limit, now)) };
  }

  adjust(buckets: readonly Bucket[], delta: number, now = Date.now()): void {
    for (const bucket of buckets) this.gcra.adjust(bucket.name, bucket.limit, delta, now);
  }

  problem(): null {
    return null;
  }

  async close(): Promise<void> {}
}
