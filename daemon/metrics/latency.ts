// Call durations as counts per fixed bucket: a minute's histogram is a few numbers whatever its calls, minutes add by
// adding their counts, and Prometheus reads the same buckets (as seconds) for its own quantiles.

/** Upper bounds of the buckets, in ms; the last bucket holds everything slower than the last bound. */
export const LATENCY_BOUNDS_MS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 120_000] as const;

export const emptyHistogram = (): number[] => new Array<number>(LATENCY_BOUNDS_MS.length + 1).fill(0);

export function bucketOf(ms: number): number {
  for (let i = 0; i < LATENCY_BOUNDS_MS.length; i++) if (ms <= LATENCY_BOUNDS_MS[i]!) return i;
  return LATENCY_BOUNDS_MS.length;
}

export function addHistogram(into: number[], from: readonly number[]): void {
  for (let i = 0; i < into.length; i++) into[i]! += from[i] ?? 0;
}

/**
 * The duration under which `q` (0..1) of the counted calls finished, interpolated inside its bucket; null with no
 * call. A quantile in the open last bucket is reported as its lower bound (the slowest bound we know).
 */
export function quantile(histogram: readonly number[], q: number): number | null {
  const total = histogram.reduce((a, b) => a + b, 0);
  if (!total) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < histogram.length; i++) {
    const count = histogram[i]!;
    if (count && seen + count >= rank) {
      const low = i === 0 ? 0 : LATENCY_BOUNDS_MS[i - 1]!;
      const high = LATENCY_BOUNDS_MS[i];
      if (high === undefined) return low;
      return low + ((high - low) * (rank - seen)) / count;
    }
    seen += count;
  }
  return LATENCY_BOUNDS_MS[LATENCY_BOUNDS_MS.length - 1]!;
}
