// Per-key request and token limits for the metered postures, and the headers OpenAI sends about them. The buckets
// live in a LimitStore: in memory for one daemon, in Redis for replicas that share limits (store.ts).
import { ApiError } from '../errors/index.js';
import type { Decision } from './gcra.js';
import { MemoryLimitStore, type Bucket, type LimitStore, type PairDecision } from './store.js';

/** A key's limits. Treated as immutable: a key whose limits change gets a new quota object. */
export interface KeyQuota {
  readonly keyId: string;
  readonly rpm: number;
  readonly tpm: number;
}

export type LimitHeaders = Record<string, string>;

/** OpenAI's reset format: "20ms", "6s", "1m30s", "2.5s". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.round((ms - minutes * 60_000) / 10) / 100;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}

/** The token limit's three headers, which the token reservation updates (the request stage has set all six). */
function tokenHeaders(tokens: Decision): LimitHeaders {
  return {
    'x-ratelimit-limit-tokens': String(tokens.limit),
    'x-ratelimit-remaining-tokens': String(tokens.remaining),
    'x-ratelimit-reset-tokens': formatDuration(tokens.resetMs),
  };
}

/** OpenAI's six headers, as one literal object (computed names and spreads cost more than the whole decision). */
function limitHeaders(requests: Decision, tokens: Decision): LimitHeaders {
  return {
    'x-ratelimit-limit-requests': String(requests.limit),
    'x-ratelimit-remaining-requests': String(requests.remaining),
    'x-ratelimit-reset-requests': formatDuration(requests.resetMs),
    'x-ratelimit-limit-tokens': String(tokens.limit),
    'x-ratelimit-remaining-tokens': String(tokens.remaining),
    'x-ratelimit-reset-tokens': formatDuration(tokens.resetMs),
  };
}

/** A store that cannot decide (Redis unreachable): nothing is admitted rather than nothing limited. */
export class LimiterUnavailableError extends ApiError {}

const LIMITER_UNAVAILABLE = () =>
  new LimiterUnavailableError(
    'server_overloaded',
    'Rate limits cannot be checked right now (the shared rate limiter does not answer). Retry shortly.',
    {
      headers: { 'retry-after': '1' },
    },
  );

interface Log {
  warn(obj: object, msg: string): void;
}

export class KeyLimits {
  constructor(
    readonly store: LimitStore = new MemoryLimitStore(),
    private readonly log?: Log,
  ) {}

  /** When a failed decision was last logged: while the store is down every call fails, and one line a minute says so. */
  private lastFailureLogged = 0;

  /**
   * The store's decision: synchronous for the memory store (a call that needs no wait costs no promise), a promise
   * for Redis. A store that fails is reported as LIMITER_UNAVAILABLE either way.
   */
  private decide(change: Bucket, cost: number, other: Bucket, now: number | undefined): PairDecision | Promise<PairDecision> {
    let decision: PairDecision | Promise<PairDecision>;
    try {
      decision = this.store.consume(change, cost, other, now);
    } catch (err) {
      throw this.unavailable(err as Error);
    }
    return decision instanceof Promise
      ? decision.catch((err: Error) => {
          throw this.unavailable(err);
        })
      : decision;
  }

  private unavailable(err: Error): LimiterUnavailableError {
    if (Date.now() - this.lastFailureLogged >= 60_000) {
      this.lastFailureLogged = Date.now();
      this.log?.warn({ err: err.message }, 'rate-limit decisions are failing; calls get 503 until the limiter answers');
    }
    return LIMITER_UNAVAILABLE();
  }

  /** Admits one request or throws 429. Returns the headers for both limits as they stand after admission. */
  admitRequest(quota: KeyQuota, now?: number): LimitHeaders | Promise<LimitHeaders> {
    const decision = this.decide(requestsOf(quota), 1, tokensOf(quota), now);
    return decision instanceof Promise ? decision.then((d) => admitted(quota, d)) : admitted(quota, decision);
  }

  /**
   * Reserves the tokens a call may use (prompt plus the most it may generate) or throws 429 (with all six headers).
   * Returns the token limit's three headers as they stand after the reservation: admitRequest's call has set the
   * request limit's. The caller settles the reservation with the real count when the call ends.
   */
  reserveTokens(quota: KeyQuota, tokens: number, now?: number): LimitHeaders | Promise<LimitHeaders> {
    const decision = this.decide(tokensOf(quota), tokens, requestsOf(quota), now);
    return decision instanceof Promise ? decision.then((d) => reserved(quota, tokens, d)) : reserved(quota, tokens, decision);
  }

  /** Replaces a reservation by what the call really used (its response has gone: no headers to make). */
  settleTokens(quota: KeyQuota, reserved: number, used: number, now?: number): void {
    if (used === reserved) return;
    try {
      const adjusted = this.store.adjust(tokensOf(quota), used - reserved, now);
      if (adjusted instanceof Promise) {
        adjusted.catch((err: Error) => this.log?.warn({ err: err.message, keyId: quota.keyId }, 'could not settle a token reservation'));
      }
    } catch (err) {
      this.log?.warn({ err: (err as Error).message, keyId: quota.keyId }, 'could not settle a token reservation');
    }
  }
}

function admitted(quota: KeyQuota, { changed: decision, other }: PairDecision): LimitHeaders {
  const headers = limitHeaders(decision, other);
  if (!decision.allowed) {
    const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
    throw new ApiError(
      'rate_limit_exceeded',
      `Rate limit reached for key ${quota.keyId}: ${quota.rpm} requests per minute. Retry in ${seconds}s, or ask the operator for a higher limit.`,
      { headers: { ...headers, 'retry-after': String(seconds) }, type: 'requests' },
    );
  }
  return headers;
}

function reserved(quota: KeyQuota, tokens: number, { changed: decision, other }: PairDecision): LimitHeaders {
  if (decision.allowed) return tokenHeaders(decision);
  const headers = limitHeaders(other, decision);
  if (!Number.isFinite(decision.retryAfterMs)) {
    throw new ApiError(
      'rate_limit_exceeded',
      `This request needs up to ${tokens} tokens, more than the ${quota.tpm} tokens per minute allowed for key ${quota.keyId}. Lower max_tokens or shorten the input.`,
      { headers: { ...headers, 'retry-after': '60' }, type: 'tokens' },
    );
  }
  const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
  throw new ApiError(
    'rate_limit_exceeded',
    `Rate limit reached for key ${quota.keyId}: ${quota.tpm} tokens per minute. Retry in ${seconds}s, or ask the operator for a higher limit.`,
    { headers: { ...headers, 'retry-after': String(seconds) }, type: 'tokens' },
  );
}

/**
 * A quota's two buckets, made once per quota object: the pipeline keeps one quota per authenticated key, so a call
 * makes no bucket names (and the store's map hashes no new string).
 */
const buckets = new WeakMap<KeyQuota, { requests: Bucket; tokens: Bucket }>();
function bucketsOf(quota: KeyQuota): { requests: Bucket; tokens: Bucket } {
  let pair = buckets.get(quota);
  if (!pair) {
    pair = { requests: { name: `r:${quota.keyId}`, limit: quota.rpm }, tokens: { name: `t:${quota.keyId}`, limit: quota.tpm } };
    buckets.set(quota, pair);
  }
  return pair;
}
const requestsOf = (quota: KeyQuota): Bucket => bucketsOf(quota).requests;
const tokensOf = (quota: KeyQuota): Bucket => bucketsOf(quota).tokens;
