// Per-key request and token limits for the metered postures, and the headers OpenAI sends about them.
import { ApiError } from '../errors/index.js';
import { Gcra, type Decision } from './gcra.js';

export interface KeyQuota {
  keyId: string;
  rpm: number;
  tpm: number;
}

export type LimitHeaders = Record<string, string>;

/** OpenAI's reset format: "20ms", "6s", "1m30s", "2.5s". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const minutes = Math.floor(ms / 60_000);
  const seconds = Math.round((ms - minutes * 60_000) / 10) / 100;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}

function headersFor(kind: 'requests' | 'tokens', d: Decision): LimitHeaders {
  return {
    [`x-ratelimit-limit-${kind}`]: String(d.limit),
    [`x-ratelimit-remaining-${kind}`]: String(d.remaining),
    [`x-ratelimit-reset-${kind}`]: formatDuration(d.resetMs),
  };
}

export class KeyLimits {
  private readonly requests = new Gcra();
  private readonly tokens = new Gcra();

  /** Admits one request or throws 429. Returns the headers for both limits as they stand after admission. */
  admitRequest(quota: KeyQuota, now = Date.now()): LimitHeaders {
    const decision = this.requests.consume(quota.keyId, quota.rpm, 1, now);
    const headers = { ...headersFor('requests', decision), ...headersFor('tokens', this.tokens.peek(quota.keyId, quota.tpm, now)) };
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

  /**
   * Reserves the tokens a call may use (prompt plus the most it may generate) or throws 429. The caller settles the
   * reservation with the real count when the call ends.
   */
  reserveTokens(quota: KeyQuota, tokens: number, now = Date.now()): LimitHeaders {
    const decision = this.tokens.consume(quota.keyId, quota.tpm, tokens, now);
    const headers = { ...headersFor('requests', this.requests.peek(quota.keyId, quota.rpm, now)), ...headersFor('tokens', decision) };
    if (decision.allowed) return headers;
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

  /** Replaces a reservation by what the call really used (its response has gone: no headers to make). */
  settleTokens(quota: KeyQuota, reserved: number, used: number, now = Date.now()): void {
    this.tokens.adjust(quota.keyId, quota.tpm, used - reserved, now);
  }
}
