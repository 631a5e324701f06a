// Where the limits' buckets live. One process: in memory (gcra.ts), the default. Several daemon replicas behind one
// address: in Redis (redis-store.ts), so that they share each key's limits exactly. Either way a decision is one
// atomic step over two buckets of the same key: it takes from one (requests, or tokens) and reads the other, so the
// rate-limit headers of both come from the same instant.
import { Gcra, type Decision } from './gcra.js';

export interface Bucket {
  name: string;
  /** Units per minute. */
  limit: number;
}

export interface PairDecision {
  /** The bucket taken from (or adjusted). */
  changed: Decision;
  /** The other bucket, read at the same instant. */
  other: Decision;
}

export interface LimitStore {
  readonly kind: 'memory' | 'redis';
  /** Takes `cost` from `change` if it fits, and reads `other`. `now` only for the memory store (tests). */
  consume(change: Bucket, cost: number, other: Bucket, now?: number): PairDecision | Promise<PairDecision>;
  /** Gives back (negative `delta`) or takes more (positive) after the real cost is known; never refuses. */
  adjust(bucket: Bucket, delta: number, now?: number): void | Promise<void>;
  /** null while it can decide; otherwise why not (for health). */
  problem(): string | null;
  close(): Promise<void>;
}

export class MemoryLimitStore implements LimitStore {
  readonly kind = 'memory';
  private readonly gcra = new Gcra();

  consume(change: Bucket, cost: number, other: Bucket, now = Date.now()): PairDecision {
    const changed = this.gcra.consume(change.name, change.limit, cost, now);
    return { changed, other: this.gcra.peek(other.name, other.limit, now) };
  }

  adjust(bucket: Bucket, delta: number, now = Date.now()): void {
    this.gcra.adjust(bucket.name, bucket.limit, delta, now);
  }

  problem(): null {
    return null;
  }

  async close(): Promise<void> {}
}
