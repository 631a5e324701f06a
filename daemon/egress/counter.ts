// The count of refused egress attempts, kept in lmdb so that it covers every boot of this data dir: health shows it
// since first boot and since this one. Each refusal is written synchronously: a refusal is rare and must not be lost
// to a crash that follows it.
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';
import type { DestinationKind, EgressChannel, RefusedAttempt } from './guard.js';

interface StoredCounts {
  refused: number;
  byChannel: Partial<Record<EgressChannel, number>>;
  byKind: Partial<Record<DestinationKind, number>>;
  lastRefusedAt: string | null;
}

export interface EgressCounts {
  refusedSinceFirstBoot: number;
  refusedSinceBoot: number;
  byChannel: Partial<Record<EgressChannel, number>>;
  byKind: Partial<Record<DestinationKind, number>>;
  lastRefusedAt: string | null;
}

const KEY = 'refused';

export class EgressCounter {
  private readonly db: Database<StoredCounts, string>;
  private stored: StoredCounts;
  private sinceBoot = 0;

  constructor(store: Store) {
    this.db = store.db<StoredCounts>('egress');
    this.stored = this.db.get(KEY) ?? { refused: 0, byChannel: {}, byKind: {}, lastRefusedAt: null };
  }

  record(attempt: RefusedAttempt): void {
    const s = this.stored;
    this.stored = {
      refused: s.refused + 1,
      byChannel: { ...s.byChannel, [attempt.channel]: (s.byChannel[attempt.channel] ?? 0) + 1 },
      byKind: { ...s.byKind, [attempt.kind]: (s.byKind[attempt.kind] ?? 0) + 1 },
      lastRefusedAt: new Date().toISOString(),
    };
    this.sinceBoot++;
    try {
      this.db.putSync(KEY, this.stored);
    } catch {
      // A full disk: the count stays in memory (health shows it) and is written with the next refusal that can be.
    }
  }

  counts(): EgressCounts {
    return {
      refusedSinceFirstBoot: this.stored.refused,
      refusedSinceBoot: this.sinceBoot,
      byChannel: { ...this.stored.byChannel },
      byKind: { ...this.stored.byKind },
      lastRefusedAt: this.stored.lastRefusedAt,
    };
  }
}
