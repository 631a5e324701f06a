// Generic cell rate algorithm: a limit of N per minute admits a burst of N, then one every 60/N seconds. One number
// per bucket (the theoretical arrival time), so each decision is O(1), and because a decision is one synchronous
// step on the event loop, concurrent requests cannot both take the last unit: the limit holds exactly.

export interface Decision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Time until the bucket is full again, in ms. */
  resetMs: number;
  /** When refused: time until this cost would be admitted, in ms (Infinity if it never fits). */
  retryAfterMs: number;
}

const PERIOD_MS = 60_000;

/** A decision with the bucket's state after it: made in one literal, as every call makes two. */
function decision(allowed: boolean, limit: number, tat: number, now: number, interval: number, retryAfterMs: number): Decision {
  return {
    allowed,
    limit,
    remaining: Math.max(0, Math.floor((now + PERIOD_MS - tat) / interval + 1e-9)),
    resetMs: Math.max(0, tat - now),
    retryAfterMs,
  };
}
const SWEEP_AT = 50_000;

export class Gcra {
  private readonly tat = new Map<string, number>();

  /** Takes `cost` units from the bucket if they fit. */
  consume(bucket: string, limit: number, cost: number, now = Date.now()): Decision {
    const interval = PERIOD_MS / limit;
    const tat = Math.max(this.tat.get(bucket) ?? now, now);
    const next = tat + cost * interval;
    const allowAt = next - PERIOD_MS;
    if (cost > limit) return decision(false, limit, tat, now, interval, Infinity);
    if (allowAt > now) return decision(false, limit, tat, now, interval, allowAt - now);
    this.tat.set(bucket, next);
    if (this.tat.size > SWEEP_AT) this.sweep(now);
    return decision(true, limit, next, now, interval, 0);
  }

  /**
   * Takes `cost` from every bucket if it fits in each, else from none (a key's bucket and its project's are decided
   * together). Each decision says whether its own bucket had room, and its state after the outcome.
   */
  consumeAll(
    buckets: ReadonlyArray<{ name: string; limit: number }>,
    cost: number,
    now = Date.now(),
  ): { allowed: boolean; decisions: Decision[] } {
    if (buckets.length === 1) {
      const only = this.consume(buckets[0]!.name, buckets[0]!.limit, cost, now);
      return { allowed: only.allowed, decisions: [only] };
    }
    const nexts: number[] = [];
    let allowed = true;
    for (const { name, limit } of buckets) {
      const next = Math.max(this.tat.get(name) ?? now, now) + cost * (PERIOD_MS / limit);
      nexts.push(next);
      if (cost > limit || next - PERIOD_MS > now) allowed = false;
    }
    const decisions = buckets.map(({ name, limit }, i) => {
      const interval = PERIOD_MS / limit;
      const tat = Math.max(this.tat.get(name) ?? now, now);
      const allowAt = nexts[i]! - PERIOD_MS;
      if (cost > limit) return decision(false, limit, tat, now, interval, Infinity);
      if (allowAt > now) return decision(false, limit, tat, now, interval, allowAt - now);
      if (!allowed) return decision(true, limit, tat, now, interval, 0);
      this.tat.set(name, nexts[i]!);
      return decision(true, limit, nexts[i]!, now, interval, 0);
    });
    if (allowed && this.tat.size > SWEEP_AT) this.sweep(now);
    return { allowed, decisions };
  }

  /** Gives units back (negative `delta`) or takes more (positive) after the real cost is known; never refuses. */
  adjust(bucket: string, limit: number, delta: number, now = Date.now()): void {
    const interval = PERIOD_MS / limit;
    const next = Math.max(this.tat.get(bucket) ?? now, now) + delta * interval;
    this.tat.set(bucket, Math.max(next, now));
  }

  peek(bucket: string, limit: number, now = Date.now()): Decision {
    const interval = PERIOD_MS / limit;
    return decision(true, limit, Math.max(this.tat.get(bucket) ?? now, now), now, interval, 0);
  }

  /** Buckets whose arrival time has passed are full; forgetting them changes nothing. */
  private sweep(now: number): void {
    for (const [bucket, tat] of this.tat) if (tat <= now) this.tat.delete(bucket);
  }
}
