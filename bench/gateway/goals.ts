// How bench:gateway judges its goals from what it measured: the saturation ratio over rounds, and the added p99 at a
// fixed rate over the rounds' pooled requests. Apart from the run so that the test suite can check the judging.
import type { LoadResult } from './load.js';

/** The middle value (the lower of the two middle ones for an even count). */
export function median<T>(items: T[], key: (item: T) => number): T {
  return [...items].sort((a, b) => key(a) - key(b))[Math.floor((items.length - 1) / 2)];
}

/** The target answered every request of a fixed-rate window, at the rate it was sent. */
export const keptUp = (r: LoadResult, rate: number): boolean => r.failed === 0 && r.rps >= rate * 0.98;

/**
 * Ours against theirs at saturation: each round's ratio (the two measured within the same half-minute), and their
 * median. Not the ratio of the two medians: this machine's speed drifts between rounds, and a round of ours in a fast
 * phase must not be set against one of theirs in a slow one.
 */
export function roundRatio(ours: number[], theirs: number[]): { ratio: number; each: number[] } {
  if (ours.length !== theirs.length) throw new Error(`rounds differ: ${ours.length} of ours, ${theirs.length} of theirs`);
  const each = ours.map((rps, i) => rps / theirs[i]);
  return { ratio: median(each, (x) => x), each };
}

/** A target's fixed-rate windows at one rate: every round's, pooled, and each round's on its own. */
export interface RateWindows {
  pooled: LoadResult;
  rounds: LoadResult[];
}

/**
 * The added p99 at a fixed rate (ours minus the floor's, each over all its rounds' requests) and whether it meets
 * `limitMs`. Only if every one of the `rounds` was measured and kept up, ours and the floor's: a pooled rate could hide
 * a round that fell behind, and a round not measured would leave the two pooling different moments.
 */
export function addedP99Goal(
  ours: RateWindows,
  floor: RateWindows,
  rate: number,
  rounds: number,
  limitMs: number,
): { added: number; clean: boolean; met: boolean } {
  const added = ours.pooled.p99 - floor.pooled.p99;
  const everyRound = (w: RateWindows) => w.rounds.length === rounds && w.rounds.every((r) => keptUp(r, rate));
  const clean = everyRound(ours) && everyRound(floor);
  return { added, clean, met: clean && added < limitMs };
}
