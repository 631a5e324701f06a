// Usage per key: calls, errors, rate-limit refusals and tokens (input and generated) per endpoint, per minute for the
// dashboard's usage chart (kept 30 days) and per day for billing (kept `usage.billingDays`, exported by `sovereign
// usage export`), and when each key was last used. Counting is a map increment after the response has gone; the
// counts reach lmdb every few seconds (and at close), so a crash loses at most those seconds of counts. The audit
// log, not this, is the record of every call.
import { randomBytes } from 'node:crypto';
import type { Database } from 'lmdb';
import type { Counts, Store } from '../store/index.js';

export interface UsageCounts {
  calls: number;
  errors: number;
  limited: number;
  /** Absent in counts written before tokens were metered: read as 0. */
  promptTokens?: number;
  completionTokens?: number;
}

/** One key's use of one endpoint on one day (UTC), for billing. */
export interface BillingRow {
  /** YYYY-MM-DD. */
  day: string;
  key: string;
  route: string;
  calls: number;
  errors: number;
  limited: number;
  promptTokens: number;
  completionTokens: number;
}

export interface UsagePoint extends UsageCounts {
  /** Start of the minute, ISO 8601. */
  minute: string;
  key: string;
  route: string;
}

const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
const FLUSH_MS = 5_000;
/** Minutes of counts kept: 30 days. */
const KEEP_MINUTES = 30 * 24 * 60;
/** How long a flush's mark (store: postgres) is kept: far longer than any flush is tried again. */
const KEEP_MARKS_MS = 2 * DAY;
const markKey = (at: number) => String(at).padStart(15, '0');

/** `minute|key|route` (or `day|key|route`): the time first, so a time range is one key range. */
const bucketKey = (minute: number, key: string, route: string) => `${String(minute).padStart(10, '0')}|${key}|${route}`;
/** The first possible key of a minute (or day): every bucket of it sorts after this, every earlier one before. */
const rangeStart = (minute: number) => `${String(minute).padStart(10, '0')}|`;

export class UsageMeter {
  private readonly counts: Database<UsageCounts, string>;
  private readonly daily: Database<UsageCounts, string>;
  private readonly lastUsedDb: Database<number, string>;
  private pending = new Map<string, UsageCounts>();
  /**
   * Counts whose flush failed, each with the mark its change wrote. With PostgreSQL a failed commit may have gone
   * through (its COMMIT was sent, the answer was lost or late): the next flush adds them only where their mark is not
   * in the shared state, so no count is added twice.
   */
  private unsure: Array<{ mark: string; counts: Map<string, UsageCounts> }> = [];
  private readonly lastUsedAt = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: Store,
    /** Told when counts could not be written (they are kept for the next try). */
    private readonly onError: (err: Error) => void = () => {},
    /** Days of daily counts kept for billing. */
    private readonly billingDays = 400,
  ) {
    this.counts = store.db<UsageCounts>('usage');
    this.daily = store.db<UsageCounts>('usage-daily');
    this.lastUsedDb = store.db<number>('key-last-used');
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  /**
   * The pending counts of a key's endpoint in a minute. The last bucket used is remembered (while the same pending map
   * stands): calls come in runs of the same key, endpoint and minute, and need not make its name and look it up.
   */
  private countsOf(minute: number, key: string, route: string): UsageCounts {
    const last = this.last;
    if (last && last.pending === this.pending && last.minute === minute && last.key === key && last.route === route) return last.counts;
    const id = bucketKey(minute, key, route);
    let counts = this.pending.get(id);
    if (!counts) this.pending.set(id, (counts = { calls: 0, errors: 0, limited: 0 }));
    this.last = { pending: this.pending, minute, key, route, counts };
    return counts;
  }

  private last: { pending: Map<string, UsageCounts>; minute: number; key: string; route: string; counts: UsageCounts } | null = null;

  /** Counts one call that has been answered. */
  record(key: string, route: string, status: number, now = Date.now()): void {
    const counts = this.countsOf(Math.floor(now / MINUTE), key, route);
    counts.calls++;
    if (status === 429) counts.limited++;
    else if (status >= 400) counts.errors++;
    this.lastUsedAt.set(key, now);
  }

  /** Counts the tokens a call used, once its engine has stopped. */
  recordTokens(key: string, route: string, prompt: number, completion: number, now = Date.now()): void {
    const counts = this.countsOf(Math.floor(now / MINUTE), key, route);
    counts.promptTokens = (counts.promptTokens ?? 0) + Math.max(0, prompt);
    counts.completionTokens = (counts.completionTokens ?? 0) + Math.max(0, completion);
  }

  /**
   * Daily counts per key and endpoint for the days from `fromDay` to `toDay` (YYYY-MM-DD, both included), as lmdb
   * holds them: what this process has not flushed yet (the last few seconds) is not in them.
   */
  billing(fromDay: string, toDay: string): BillingRow[] {
    const from = Math.floor(Date.parse(`${fromDay}T00:00:00Z`) / DAY);
    const to = Math.floor(Date.parse(`${toDay}T00:00:00Z`) / DAY);
    const rows: BillingRow[] = [];
    for (const { key: id, value } of this.daily.getRange({ start: rangeStart(from), end: rangeStart(to + 1) })) {
      const [day, key, route] = id.split('|') as [string, string, string];
      rows.push({
        day: new Date(Number(day) * DAY).toISOString().slice(0, 10),
        key,
        route,
        calls: value.calls,
        errors: value.errors,
        limited: value.limited,
        promptTokens: value.promptTokens ?? 0,
        completionTokens: value.completionTokens ?? 0,
      });
    }
    return rows;
  }

  lastUsed(key: string): string | null {
    const at = this.lastUsedAt.get(key) ?? this.lastUsedDb.get(key);
    return at === undefined ? null : new Date(at).toISOString();
  }

  /** Counts per minute for the given keys since `fromMs` (the last minutes may still be in memory). */
  series(keys: Set<string>, fromMs: number): UsagePoint[] {
    const merged = new Map<string, UsageCounts>();
    for (const { key, value } of this.counts.getRange({ start: rangeStart(Math.floor(fromMs / MINUTE)) })) merged.set(key, { ...value });
    for (const [id, counts] of this.pending) {
      const total = merged.get(id);
      if (total) add(total, counts);
      else merged.set(id, { ...counts });
    }
    const out: UsagePoint[] = [];
    for (const [id, counts] of merged) {
      const [minute, key, route] = id.split('|') as [string, string, string];
      if (Number(minute) * MINUTE < fromMs || !keys.has(key)) continue;
      out.push({ minute: new Date(Number(minute) * MINUTE).toISOString(), key, route, ...counts });
    }
    return out.sort((a, b) => a.minute.localeCompare(b.minute));
  }

  /**
   * Adds the pending counts to lmdb and drops minutes older than the retention. A failed write keeps its counts for
   * the next try and is reported, never thrown: usage must not stop the daemon.
   */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      const batch = this.pending;
      const lastUsed = [...this.lastUsedAt];
      const retried = this.unsure;
      this.pending = new Map();
      this.unsure = [];
      if (!batch.size && !retried.length) return;
      const now = Date.now();
      const flushes = [...retried, ...(batch.size ? [{ mark: `${markKey(now)}|${randomBytes(6).toString('hex')}`, counts: batch }] : [])];
      // Only PostgreSQL's commits can fail and yet have gone through; lmdb's fail whole.
      const marked = this.store.shared !== null;
      try {
        // Added, not written over: other replicas add their counts to the same minutes and days.
        await this.store.update((tx) => {
          for (const { mark, counts: buckets } of flushes) {
            if (marked) {
              // Read in the change: a commit of the same mark still under way in PostgreSQL makes this one run again.
              if (tx.get('usage-flushes', mark) !== undefined) continue;
              tx.put('usage-flushes', mark, true);
            }
            for (const [id, counts] of buckets) {
              tx.add('usage', id, counts as unknown as Counts);
              // The same counts, added to their day's (the minute's index times 60 s falls in exactly one day).
              const [minute, key, route] = id.split('|') as [string, string, string];
              tx.add('usage-daily', bucketKey(Math.floor((Number(minute) * MINUTE) / DAY), key, route), counts as unknown as Counts);
            }
          }
          for (const [key, at] of lastUsed) if ((tx.get<number>('key-last-used', key) ?? 0) < at) tx.put('key-last-used', key, at);
          const horizon = rangeStart(Math.floor(now / MINUTE) - KEEP_MINUTES);
          for (const { key } of tx.range('usage', { end: horizon })) tx.remove('usage', key);
          const billingHorizon = rangeStart(Math.floor(now / DAY) - this.billingDays);
          for (const { key } of tx.range('usage-daily', { end: billingHorizon })) tx.remove('usage-daily', key);
          if (marked)
            for (const { key } of tx.range('usage-flushes', { end: markKey(now - KEEP_MARKS_MS) })) tx.remove('usage-flushes', key);
        });
      } catch (err) {
        if (marked) this.unsure = [...flushes, ...this.unsure];
        else {
          for (const [id, counts] of batch) {
            const newer = this.pending.get(id);
            if (newer) add(newer, counts);
            else this.pending.set(id, counts);
          }
        }
        this.onError(err as Error);
      }
    });
    return this.flushing;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush();
  }
}

function add(into: UsageCounts, from: UsageCounts): UsageCounts {
  into.calls += from.calls;
  into.errors += from.errors;
  into.limited += from.limited;
  if (from.promptTokens || from.completionTokens) {
    into.promptTokens = (into.promptTokens ?? 0) + (from.promptTokens ?? 0);
    into.completionTokens = (into.completionTokens ?? 0) + (from.completionTokens ?? 0);
  }
  return into;
}
