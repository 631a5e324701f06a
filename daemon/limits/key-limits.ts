// Per-key and per-project request and token limits for the metered postures, and the headers OpenAI sends about
// them. A call takes from its key's bucket and its project's together, so a project's keys between them never exceed
// the project's limit however many keys it has. The buckets live in a LimitStore: in memory for one daemon, in Redis
// for replicas that share limits (store.ts).
import { ApiError } from '../errors/index.js';
import type { Decision } from './gcra.js';
import { MemoryLimitStore, type Bucket, type GroupDecision, type LimitStore } from './store.js';

/** A key's limits, and its project's. Treated as immutable: a key whose limits change gets a new quota object. */
export interface KeyQuota {
  readonly keyId: string;
  readonly rpm: number;
  readonly tpm: number;
  /** The limits all the keys of the key's project share; absent, only the key's own apply. */
  readonly project?: { readonly id: string; readonly rpm: number; readonly tpm: number };
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
      // The limiter failing is the daemon's failure, unlike a device at capacity.
      expected: false,
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
  private decide(
    change: readonly Bucket[],
    cost: number,
    other: readonly Bucket[],
    now: number | undefined,
  ): GroupDecision | Promise<GroupDecision> {
    let decision: GroupDecision | Promise<GroupDecision>;
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

/**
 * Of a key's decision and its project's, the one the headers describe: the refusing one (the one that frees last, if
 * both refused), else the one with fewer units left, so the headers say how much the caller may really still use.
 */
function binding(decisions: Decision[]): { decision: Decision; project: boolean } {
  let at = 0;
  for (let i = 1; i < decisions.length; i++) {
    const best = decisions[at]!;
    const next = decisions[i]!;
    const worse = !next.allowed ? best.allowed || next.retryAfterMs > best.retryAfterMs : best.allowed && next.remaining < best.remaining;
    if (worse) at = i;
  }
  return { decision: decisions[at]!, project: at > 0 };
}

/** Whose limit refused: the key's, or the project's shared by all its keys. */
function whose(quota: KeyQuota, project: boolean, unit: 'requests' | 'tokens'): string {
  if (project && quota.project) {
    const limit = unit === 'requests' ? quota.project.rpm : quota.project.tpm;
    return `project ${quota.project.id}: ${limit} ${unit} per minute, shared by all its keys`;
  }
  return `key ${quota.keyId}: ${unit === 'requests' ? quota.rpm : quota.tpm} ${unit} per minute`;
}

function admitted(quota: KeyQuota, group: GroupDecision): LimitHeaders {
  const { decision, project } = binding(group.changed);
  const headers = limitHeaders(decision, binding(group.other).decision);
  if (!group.allowed) {
    const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
    throw new ApiError(
      'rate_limit_exceeded',
      `Rate limit reached for ${whose(quota, project, 'requests')}. Retry in ${seconds}s, or ask the operator for a higher limit.`,
      { headers: { ...headers, 'retry-after': String(seconds) }, type: 'requests' },
    );
  }
  return headers;
}

function reserved(quota: KeyQuota, tokens: number, group: GroupDecision): LimitHeaders {
  const { decision, project } = binding(group.changed);
  if (group.allowed) return tokenHeaders(decision);
  const headers = limitHeaders(binding(group.other).decision, decision);
  if (!Number.isFinite(decision.retryAfterMs)) {
    const limit = project && quota.project ? quota.project.tpm : quota.tpm;
    const holder = project && quota.project ? `project ${quota.project.id}` : `key ${quota.keyId}`;
    throw new ApiError(
      'rate_limit_exceeded',
      `This request needs up to ${tokens} tokens, more than the ${limit} tokens per minute allowed for ${holder}. Lower max_tokens or shorten the input.`,
      { headers: { ...headers, 'retry-after': '60' }, type: 'tokens' },
    );
  }
  const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
  throw new ApiError(
    'rate_limit_exceeded',
    `Rate limit reached for ${whose(quota, project, 'tokens')}. Retry in ${seconds}s, or ask the operator for a higher limit.`,
    { headers: { ...headers, 'retry-after': String(seconds) }, type: 'tokens' },
  );
}

/**
 * A quota's buckets, made once per quota object: the pipeline keeps one quota per authenticated key, so a call makes
 * no bucket names (and the store's map hashes no new string). Every name starts with the project's hash tag, which
 * keeps all of a call's buckets in one Redis cluster slot.
 */
const buckets = new WeakMap<KeyQuota, { requests: Bucket[]; tokens: Bucket[] }>();
function bucketsOf(quota: KeyQuota): { requests: Bucket[]; tokens: Bucket[] } {
  let made = buckets.get(quota);
  if (!made) {
    const { keyId, project } = quota;
    const tag = `{${project?.id ?? keyId}}`;
    made = { requests: [{ name: `${tag}:r:${keyId}`, limit: quota.rpm }], tokens: [{ name: `${tag}:t:${keyId}`, limit: quota.tpm }] };
    if (project) {
      made.requests.push({ name: `${tag}:r:${project.id}`, limit: project.rpm });
      made.tokens.push({ name: `${tag}:t:${project.id}`, limit: project.tpm });
    }
    buckets.set(quota, made);
  }
  return made;
}
const requestsOf = (quota: KeyQuota): Bucket[] => bucketsOf(quota).requests;
const tokensOf = (quota: KeyQuota): Bucket[] => bucketsOf(quota).tokens;
