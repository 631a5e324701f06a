// The operator's counters: per model calls, tokens, durations and queue length; errors by code; redactions by type
// (counts only, never values); refused egress attempts; the data directory's size and its filesystem's room. Kept per
// minute for 30 days in this machine's lmdb (each replica counts its own: they are this machine's figures), and added
// up per hour beside them, for the console's charts: a chart in steps of hours reads hours (720 records for 30 days),
// never the 43,200 minutes, so drawing it does not hold up the calls. The totals since start feed the Prometheus
// endpoint (daemon/prometheus). Counting is a few map increments when a call ends; the minutes reach lmdb every few
// seconds (and at close), so a crash loses at most those seconds of counts.
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';
import { addHistogram, bucketOf, emptyHistogram, quantile } from './latency.js';
import { fullIn, sampleDisk } from './disk.js';
import type { DiskReading, DiskSample, MetricsSeries, MetricsTotals } from './types.js';

export type { DiskReading, DiskSample, MetricsSeries, MetricsTotals, ModelTotals } from './types.js';

export { LATENCY_BOUNDS_MS, quantile } from './latency.js';
export { fullIn } from './disk.js';

const MINUTE = 60_000;
const FLUSH_MS = 5_000;
const KEEP_MINUTES = 30 * 24 * 60;
const DISK_EVERY_MS = MINUTE;
/** The span a disk's rate of filling is measured over. */
const DISK_RATE_MS = 24 * 3600_000;

export interface ModelMinute {
  calls: number;
  errors: number;
  promptTokens: number;
  completionTokens: number;
  /** Durations, counts per bucket of LATENCY_BOUNDS_MS. */
  latency: number[];
  /** The most calls seen waiting at once in the minute (sampled every few seconds). */
  queue: number;
}

/** One minute of this machine's counters. */
export interface MinuteRecord {
  /** Every /v1 call that ended, and those answered with an error. */
  calls: number;
  errors: number;
  models: Record<string, ModelMinute>;
  errorCodes: Record<string, number>;
  redactions: Record<string, number>;
  egressRefused: number;
  /** The last disk sample taken in the minute, if one was. */
  disk?: DiskSample;
}

/** What a call that ended tells the counters. */
export interface EndedCall {
  model: string | null;
  status: number;
  /** The error's code when the answer was an error. */
  errorCode: string | null;
  durationMs: number;
  /** Redactions in the request and in the answer, by type. */
  redactions: Record<string, number> | null;
  outputRedactions: Record<string, number> | null;
}

/**
 * A map from names to values with no prototype: the names are model ids, which may be 'constructor' or 'toString'
 * (valid ids), and a plain object's `{}['constructor'] ??= …` finds Object itself and counts on it.
 */
const dict = <T>(): Record<string, T> => Object.create(null) as Record<string, T>;

const emptyMinute = (): MinuteRecord => ({ calls: 0, errors: 0, models: dict(), errorCodes: dict(), redactions: dict(), egressRefused: 0 });
const emptyModel = (): ModelMinute => ({ calls: 0, errors: 0, promptTokens: 0, completionTokens: 0, latency: emptyHistogram(), queue: 0 });

/** A count as stored: a finite number of zero or more, else 0 (a damaged or older record never makes NaN). */
const countOf = (value: unknown): number => (typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0);
const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function addInto(into: Record<string, number>, from: unknown): void {
  if (!isObject(from)) return;
  for (const [k, v] of Object.entries(from)) {
    const n = countOf(v);
    if (n) into[k] = (into[k] ?? 0) + n;
  }
}

/**
 * Adds `from` into `into`. `from` may be a record read from lmdb, of an older shape or damaged: what is not a count
 * where a count belongs is skipped, so that one bad minute neither stops the flush nor the charts.
 */
function mergeMinute(into: MinuteRecord, from: unknown): MinuteRecord {
  if (!isObject(from)) return into;
  into.calls += countOf(from.calls);
  into.errors += countOf(from.errors);
  if (isObject(from.models)) {
    for (const [id, m] of Object.entries(from.models)) {
      if (!isObject(m)) continue;
      const target = (into.models[id] ??= emptyModel());
      target.calls += countOf(m.calls);
      target.errors += countOf(m.errors);
      target.promptTokens += countOf(m.promptTokens);
      target.completionTokens += countOf(m.completionTokens);
      if (Array.isArray(m.latency)) addHistogram(target.latency, m.latency.map(countOf));
      target.queue = Math.max(target.queue, countOf(m.queue));
    }
  }
  addInto(into.errorCodes, from.errorCodes);
  addInto(into.redactions, from.redactions);
  into.egressRefused += countOf(from.egressRefused);
  const disk = from.disk;
  if (isObject(disk) && typeof disk.used === 'number' && typeof disk.free === 'number' && typeof disk.total === 'number')
    into.disk = { used: disk.used, free: disk.free, total: disk.total };
  return into;
}

export interface MetricsOptions {
  dataDir: string;
  /** Calls waiting per model now, sampled every few seconds for the queue series. */
  queues: () => Array<{ model: string; waiting: number }>;
  /** Told when counts could not be written (they are kept for the next try). */
  onError?: (err: Error) => void;
  /** Told when the data directory could not be measured (the last sample stands; tried again in a minute). */
  onDiskError?: (err: Error) => void;
}

export class OperatorMetrics {
  private readonly db: Database<MinuteRecord, number>;
  /** The same counts added up per hour (keyed by the hour's index since the epoch). */
  private readonly hourly: Database<MinuteRecord, number>;
  /** Free space samples of the last day, oldest first: the disk's rate of filling. */
  private diskHistory: Array<{ at: number; free: number }> = [];
  private pending = new Map<number, MinuteRecord>();
  /** The minutes a flush is writing: read with the pending ones until lmdb has them. */
  private writing = new Map<number, MinuteRecord>();
  private timer: NodeJS.Timeout | null = null;
  private diskTimer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> = Promise.resolve();
  private sampling = false;
  private lastDisk: DiskReading | null = null;
  readonly totals: MetricsTotals = { calls: new Map(), errorCodes: new Map(), redactions: new Map() };

  constructor(
    store: Store,
    private readonly options: MetricsOptions,
  ) {
    this.db = store.db<MinuteRecord, number>('operator-metrics');
    this.hourly = store.db<MinuteRecord, number>('operator-metrics-hourly');
  }

  start(): void {
    // The rate of filling carries over a restart: the last day's hourly samples.
    const now = Date.now();
    for (const [hour, record] of this.records(60, now - DISK_RATE_MS, now)) {
      if (record.disk) this.diskHistory.push({ at: hour * 60 * MINUTE, free: record.disk.free });
    }
    this.timer = setInterval(() => {
      this.sampleQueues();
      void this.flush();
    }, FLUSH_MS);
    this.timer.unref();
    void this.sampleDisk();
    this.diskTimer = setInterval(() => void this.sampleDisk(), DISK_EVERY_MS);
    this.diskTimer.unref();
  }

  private minute(now: number): MinuteRecord {
    const at = Math.floor(now / MINUTE);
    let record = this.pending.get(at);
    if (!record) this.pending.set(at, (record = emptyMinute()));
    return record;
  }

  /** Counts a /v1 call that ended. */
  recordCall(call: EndedCall, now = Date.now()): void {
    const minute = this.minute(now);
    const failed = call.status >= 400;
    minute.calls++;
    if (failed) minute.errors++;
    if (call.errorCode) {
      minute.errorCodes[call.errorCode] = (minute.errorCodes[call.errorCode] ?? 0) + 1;
      this.totals.errorCodes.set(call.errorCode, (this.totals.errorCodes.get(call.errorCode) ?? 0) + 1);
    }
    if (call.redactions) this.countRedactions(minute, call.redactions);
    if (call.outputRedactions) this.countRedactions(minute, call.outputRedactions);
    if (call.model === null) return;
    const model = (minute.models[call.model] ??= emptyModel());
    model.calls++;
    if (failed) model.errors++;
    const bucket = bucketOf(call.durationMs);
    model.latency[bucket]!++;
    const total = this.totalOf(call.model);
    total.calls++;
    if (failed) total.errors++;
    total.latency[bucket]!++;
    total.sumMs += Math.max(0, call.durationMs);
  }

  private countRedactions(minute: MinuteRecord, counts: Record<string, number>): void {
    for (const type in counts) {
      const n = counts[type]!;
      if (!n) continue;
      minute.redactions[type] = (minute.redactions[type] ?? 0) + n;
      this.totals.redactions.set(type, (this.totals.redactions.get(type) ?? 0) + n);
    }
  }

  private totalOf(model: string) {
    let total = this.totals.calls.get(model);
    if (!total)
      this.totals.calls.set(
        model,
        (total = { calls: 0, errors: 0, promptTokens: 0, completionTokens: 0, latency: emptyHistogram(), sumMs: 0 }),
      );
    return total;
  }

  /** Counts the tokens a call used, once its engine has stopped (in the minute it stopped). */
  recordTokens(model: string, prompt: number, completion: number, now = Date.now()): void {
    const m = (this.minute(now).models[model] ??= emptyModel());
    m.promptTokens += Math.max(0, prompt);
    m.completionTokens += Math.max(0, completion);
    const total = this.totalOf(model);
    total.promptTokens += Math.max(0, prompt);
    total.completionTokens += Math.max(0, completion);
  }

  /** Counts an outbound attempt the egress guard refused. */
  recordEgressRefused(now = Date.now()): void {
    this.minute(now).egressRefused++;
  }

  private sampleQueues(now = Date.now()): void {
    for (const { model, waiting } of this.options.queues()) {
      if (!waiting) continue;
      const m = (this.minute(now).models[model] ??= emptyModel());
      m.queue = Math.max(m.queue, waiting);
    }
  }

  private async sampleDisk(): Promise<void> {
    // A walk slower than a minute (a data directory of very many files, a slow disk) is not joined by another.
    if (this.sampling) return;
    this.sampling = true;
    try {
      const sample = await sampleDisk(this.options.dataDir);
      const now = Date.now();
      this.minute(now).disk = sample;
      this.diskHistory.push({ at: now, free: sample.free });
      while (this.diskHistory[0]!.at < now - DISK_RATE_MS) this.diskHistory.shift();
      this.lastDisk = { ...sample, at: new Date(now).toISOString(), fullInSeconds: fullIn(this.diskHistory) };
    } catch (err) {
      this.options.onDiskError?.(err as Error);
    } finally {
      this.sampling = false;
    }
  }

  /** The newest disk sample, and when the filesystem fills at its rate over the last day (null: not filling). */
  disk(): DiskReading | null {
    return this.lastDisk;
  }

  /**
   * Stored and pending counts from `fromMs` to `toMs` in units of `unit` minutes (1: the minutes; 60: the hours), each
   * keyed by its index since the epoch, merged, in order.
   */
  private records(unit: 1 | 60, fromMs: number, toMs: number): Map<number, MinuteRecord> {
    const start = Math.floor(fromMs / (unit * MINUTE));
    const end = Math.floor(toMs / (unit * MINUTE));
    const out = new Map<number, MinuteRecord>();
    const db = unit === 1 ? this.db : this.hourly;
    for (const { key, value } of db.getRange({ start, end: end + 1 })) out.set(key, mergeMinute(emptyMinute(), value));
    // Minutes not in lmdb yet, in the order they were counted (the last disk sample wins).
    const unsaved = [...this.writing, ...this.pending].sort(([a], [b]) => a - b);
    for (const [minute, record] of unsaved) {
      const at = Math.floor(minute / unit);
      if (at < start || at > end) continue;
      out.set(at, mergeMinute(out.get(at) ?? emptyMinute(), record));
    }
    return new Map([...out].sort(([a], [b]) => a - b));
  }

  /**
   * The counters of the last `hours`, in `buckets` equal steps ending with the current minute; steps of whole hours end
   * with the current hour and are read from the hourly counts.
   */
  series(hours: number, buckets: number, now = Date.now()): MetricsSeries {
    const minutes = hours * 60;
    const perBucket = Math.max(1, Math.ceil(minutes / buckets));
    const count = Math.ceil(minutes / perBucket);
    const unit: 1 | 60 = perBucket % 60 === 0 ? 60 : 1;
    const unitsPerBucket = perBucket / unit;
    const lastUnit = Math.floor(now / (unit * MINUTE));
    const firstUnit = lastUnit - count * unitsPerBucket + 1;
    const firstMs = firstUnit * unit * MINUTE;
    const zeros = () => new Array<number>(count).fill(0);
    const out: MetricsSeries = {
      from: new Date(firstMs).toISOString(),
      stepSeconds: perBucket * 60,
      buckets: count,
      calls: zeros(),
      errors: zeros(),
      models: dict(),
      errorCodes: dict(),
      redactions: dict(),
      egressRefused: zeros(),
      diskUsed: new Array<number | null>(count).fill(null),
    };
    const histograms = new Map<string, number[][]>();
    const totals = new Map<string, number[]>();
    for (const [at, record] of this.records(unit, firstMs, now)) {
      const i = Math.floor((at - firstUnit) / unitsPerBucket);
      if (i < 0 || i >= count) continue;
      out.calls[i]! += record.calls;
      out.errors[i]! += record.errors;
      out.egressRefused[i]! += record.egressRefused;
      if (record.disk) out.diskUsed[i] = record.disk.used;
      for (const [code, n] of Object.entries(record.errorCodes)) (out.errorCodes[code] ??= zeros())[i]! += n;
      for (const [type, n] of Object.entries(record.redactions)) (out.redactions[type] ??= zeros())[i]! += n;
      for (const [id, m] of Object.entries(record.models)) {
        const series = (out.models[id] ??= {
          calls: zeros(),
          tokens: zeros(),
          p95Ms: new Array<number | null>(count).fill(null),
          queue: zeros(),
          totals: { calls: 0, errors: 0, callsPerSecond: 0, tokensPerSecond: 0, p95Ms: null, queueMax: 0 },
        });
        series.calls[i]! += m.calls;
        series.tokens[i]! += m.promptTokens + m.completionTokens;
        series.queue[i] = Math.max(series.queue[i]!, m.queue);
        series.totals.calls += m.calls;
        series.totals.errors += m.errors;
        series.totals.queueMax = Math.max(series.totals.queueMax, m.queue);
        const buckets = histograms.get(id) ?? histograms.set(id, Array.from({ length: count }, emptyHistogram)).get(id)!;
        addHistogram(buckets[i]!, m.latency);
        const whole = totals.get(id) ?? totals.set(id, emptyHistogram()).get(id)!;
        addHistogram(whole, m.latency);
      }
    }
    const seconds = count * perBucket * 60;
    for (const [id, series] of Object.entries(out.models)) {
      const buckets = histograms.get(id)!;
      series.p95Ms = buckets.map((h) => roundMs(quantile(h, 0.95)));
      series.totals.p95Ms = roundMs(quantile(totals.get(id)!, 0.95));
      series.totals.callsPerSecond = series.totals.calls / seconds;
      series.totals.tokensPerSecond = series.tokens.reduce((a, b) => a + b, 0) / seconds;
    }
    return out;
  }

  /**
   * Adds the pending minutes to lmdb and drops minutes older than 30 days. A failed write keeps its counts for the next
   * try and is reported, never thrown: counting must not stop the daemon.
   */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(async () => {
      const batch = this.pending;
      if (!batch.size) return;
      this.pending = new Map();
      this.writing = batch;
      const horizon = Math.floor(Date.now() / MINUTE) - KEEP_MINUTES;
      try {
        // The minutes, and the same counts added to their hours, in one transaction: the two never disagree.
        const hours = new Map<number, MinuteRecord>();
        for (const [at, record] of [...batch].sort(([a], [b]) => a - b)) {
          const hour = Math.floor(at / 60);
          hours.set(hour, mergeMinute(hours.get(hour) ?? emptyMinute(), record));
        }
        await this.db.transaction(() => {
          for (const [db, records] of [
            [this.db, batch],
            [this.hourly, hours],
          ] as const) {
            for (const [at, record] of records) {
              const stored: unknown = db.get(at);
              void db.put(at, stored === undefined ? record : mergeMinute(mergeMinute(emptyMinute(), stored), record));
            }
          }
          for (const key of this.db.getKeys({ end: horizon })) void this.db.remove(key);
          for (const key of this.hourly.getKeys({ end: Math.floor(horizon / 60) })) void this.hourly.remove(key);
        });
      } catch (err) {
        for (const [at, record] of batch) {
          // Kept no longer than a written minute would be: a disk full for days does not grow this without end.
          if (at < horizon) continue;
          const newer = this.pending.get(at);
          this.pending.set(at, newer ? mergeMinute(record, newer) : record);
        }
        this.options.onError?.(err as Error);
      } finally {
        this.writing = new Map();
      }
    });
    return this.flushing;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.diskTimer) clearInterval(this.diskTimer);
    await this.flush();
  }
}

const roundMs = (ms: number | null) => (ms === null ? null : Math.round(ms));
