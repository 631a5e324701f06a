// Which replica runs a batch (store: postgres). Every replica sees every batch that has not ended; one runs it: the
// holder of its lease, a shared record (`batch-leases`: batch id → holder and until) taken through `Store.update`.
// The change reads the lease it replaces, and that read is checked at commit, so of two replicas taking a batch at
// once one does. The holder renews its lease while the batch runs; the lease goes with the batch's end (store.ts), and
// a runner that stops lets its leases go. A replica killed keeps its leases until they run out; then another takes
// its batches and runs the lines not done (a line that was running on the dead replica runs again).
//
// The holder is the replica's host and data directory (replicaOf), the same after a restart: a replica that comes
// back takes its own batches again at once. Leases are the replicas' clocks: they must agree to within a fraction of
// LEASE_MS (NTP does). On lmdb one process owns the batches, and the runner needs no lease.
import type { Database } from 'lmdb';
import { replicaOf, type Store } from '../store/index.js';

/** How long a lease holds without being renewed: how long a killed replica's batches wait for another. */
export const LEASE_MS = 15_000;
/** How often a held lease is renewed. */
export const RENEW_MS = 5_000;
/** How often a runner looks at the leases: renews its own, takes batches no one holds. */
const LOOK_MS = 1_000;
/** A batch no one holds is taken by a replica whose workers are all busy once it has waited this long. */
const TAKE_WHEN_BUSY_MS = 2_000;

export interface Lease {
  holder: string;
  /** ms since the epoch, by the holder's clock. */
  until: number;
}

/** The times above, shorter in tests. */
export interface LeaseOptions {
  holder?: string;
  leaseMs?: number;
  renewMs?: number;
  lookMs?: number;
  takeWhenBusyMs?: number;
  now?: () => number;
}

export class BatchLeases {
  /** This replica, as its leases name it. */
  readonly holder: string;
  readonly leaseMs: number;
  readonly lookMs: number;
  readonly takeWhenBusyMs: number;
  private readonly renewMs: number;
  private readonly now: () => number;
  private readonly leases: Database<Lease, string>;

  constructor(
    private readonly store: Store,
    options: LeaseOptions = {},
  ) {
    this.holder = options.holder ?? replicaOf(store);
    this.leaseMs = options.leaseMs ?? LEASE_MS;
    this.renewMs = options.renewMs ?? RENEW_MS;
    this.lookMs = options.lookMs ?? LOOK_MS;
    this.takeWhenBusyMs = options.takeWhenBusyMs ?? TAKE_WHEN_BUSY_MS;
    this.now = options.now ?? Date.now;
    this.leases = store.db<Lease>('batch-leases');
  }

  /** The batch's lease as this replica's copy holds it. */
  lease(id: string): Lease | undefined {
    return this.leases.get(id);
  }

  /** Whether a lease this replica holds until `until` is due to be renewed. */
  due(until: number, now = this.now()): boolean {
    return until - now <= this.leaseMs - this.renewMs;
  }

  /**
   * Takes or renews the leases of `ids` for `leaseMs`: those no one holds, whose lease ran out, or that are this
   * replica's. Answers the ones it holds now, with when each runs out and who held it before (another replica whose
   * lease ran out; null when it was free or this replica's). A batch another replica holds, or that has ended, is not
   * taken.
   */
  async hold(ids: readonly string[]): Promise<Map<string, { until: number; from: string | null }>> {
    return this.store.update((tx) => {
      const now = this.now();
      const held = new Map<string, { until: number; from: string | null }>();
      for (const id of ids) {
        if (!tx.get('batches-active', id)) continue;
        const lease = tx.get<Lease>('batch-leases', id);
        if (lease && lease.holder !== this.holder && lease.until > now) continue;
        const until = now + this.leaseMs;
        tx.put('batch-leases', id, { holder: this.holder, until } satisfies Lease);
        held.set(id, { until, from: lease && lease.holder !== this.holder ? lease.holder : null });
      }
      return held;
    });
  }

  /** Lets go of the leases of `ids` that this replica still holds: another replica may take them at once. */
  async release(ids: readonly string[]): Promise<void> {
    await this.store.update((tx) => {
      for (const id of ids) if (tx.get<Lease>('batch-leases', id)?.holder === this.holder) tx.remove('batch-leases', id);
    });
  }
}
