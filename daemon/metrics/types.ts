// The counters of a period as the console's charts read them. Plain types that import nothing: the console's web code
// reads them too (daemon/dashboard/wire.ts).

/** A period's counters, one value per bucket of `stepSeconds` from `from`: what the console's charts draw. */
export interface MetricsSeries {
  from: string;
  stepSeconds: number;
  buckets: number;
  calls: number[];
  errors: number[];
  models: Record<string, { calls: number[]; tokens: number[]; p95Ms: Array<number | null>; queue: number[]; totals: ModelTotals }>;
  errorCodes: Record<string, number[]>;
  redactions: Record<string, number[]>;
  egressRefused: number[];
  /** Bytes the data directory held at each bucket's last sample (null: no sample in that bucket). */
  diskUsed: Array<number | null>;
}

/** A model's figures over a whole period. */
export interface ModelTotals {
  calls: number;
  errors: number;
  callsPerSecond: number;
  tokensPerSecond: number;
  p95Ms: number | null;
  queueMax: number;
}

/** The data directory's size on disk and its filesystem's room, as sampled. */
export interface DiskSample {
  /** Bytes the data directory's files occupy on disk (allocated blocks: lmdb's files are sparse). */
  used: number;
  /** Bytes an unprivileged writer may still use on its filesystem, and the filesystem's size. */
  free: number;
  total: number;
}

/** The newest disk sample, when it was taken, and the seconds until the filesystem is full at its rate (null: not filling). */
export type DiskReading = DiskSample & { at: string; fullInSeconds: number | null };

/** Totals since this process started (counters restart at zero with the process, as Prometheus expects). */
export interface MetricsTotals {
  calls: Map<
    string,
    {
      calls: number;
      errors: number;
      promptTokens: number;
      completionTokens: number;
      latency: number[];
      /** Their durations added, ms. */
      sumMs: number;
    }
  >;
  errorCodes: Map<string, number>;
  redactions: Map<string, number>;
}
