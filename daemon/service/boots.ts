// Each start of the daemon on this data dir, and whether the one before it stopped cleanly: a record in lmdb marked
// running at start and stopped at a clean close. Found still running at the next start, the last run crashed (or was
// killed), and health says so.
import type { Database } from 'lmdb';
import type { BootReport } from '../health/index.js';
import type { Store } from '../store/index.js';

interface BootRecord {
  boots: number;
  crashes: number;
  running: boolean;
}

const KEY = 'boots';

export class BootLog {
  private readonly db: Database<BootRecord, string>;
  readonly report: BootReport;

  constructor(store: Store) {
    this.db = store.db<BootRecord>('service');
    const before = this.db.get(KEY);
    const crashed = before?.running === true;
    const record = { boots: (before?.boots ?? 0) + 1, crashes: (before?.crashes ?? 0) + (crashed ? 1 : 0), running: true };
    this.db.putSync(KEY, record);
    this.report = { boots: record.boots, crashes: record.crashes, previous_stop: before ? (crashed ? 'crash' : 'clean') : null };
  }

  /**
   * At the end of a clean close. Returns false if it could not be written (a full disk): the next boot then counts a
   * crash, which is better than a stop that ends in a failure.
   */
  stopped(): boolean {
    const record = this.db.get(KEY);
    try {
      if (record) this.db.putSync(KEY, { ...record, running: false });
      return true;
    } catch {
      return false;
    }
  }
}
