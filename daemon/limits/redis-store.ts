// Limits shared by every daemon replica, in Redis (config limits.store = "redis"). Each decision is one Lua script,
// which Redis runs atomically, on the server's own clock (replicas' clocks may differ), so concurrent calls through
// any number of replicas cannot both take the last unit: the limit holds exactly, as it does in one process. The
// algorithm is the same GCRA as gcra.ts (one number per bucket, the theoretical arrival time), and a bucket's key
// expires once it is full again, so idle keys cost Redis nothing. A key's two buckets share a hash tag, so they live
// in one slot of a cluster.
//
// When Redis does not answer, nothing is admitted (the caller answers 503): limits that cannot be checked are not
// skipped. Health reports it.
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import type { Decision } from './gcra.js';
import type { Bucket, LimitStore, PairDecision } from './store.js';

const GCRA_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local period = 60000
local limit = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local interval = period / limit
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allowed = 0
local retry = 0
if ARGV[4] == 'adjust' then
  tat = tat + cost * interval
  if tat < now then tat = now end
  allowed = 1
elseif cost > limit then
  retry = -1
else
  local nextTat = tat + cost * interval
  local allowAt = nextTat - period
  if allowAt > now then
    retry = allowAt - now
  else
    tat = nextTat
    allowed = 1
  end
end
if allowed == 1 then
  if tat > now then
    redis.call('SET', KEYS[1], string.format('%.17g', tat), 'PX', math.ceil(tat - now) + 1000)
  else
    redis.call('DEL', KEYS[1])
  end
end
local function state(at, step)
  local remaining = math.floor((now + period - at) / step + 1e-9)
  if remaining < 0 then remaining = 0 end
  local reset = at - now
  if reset < 0 then reset = 0 end
  return remaining, reset
end
local remaining, reset = state(tat, interval)
local otherLimit = tonumber(ARGV[3])
local otherTat = tonumber(redis.call('GET', KEYS[2]) or now)
if otherTat < now then otherTat = now end
local otherRemaining, otherReset = state(otherTat, period / otherLimit)
return {allowed, remaining, tostring(reset), tostring(retry), otherRemaining, tostring(otherReset)}
`;

export interface RedisLimitOptions {
  url: string;
  passwordFile?: string;
  keyPrefix: string;
  timeoutMs: number;
}

interface Log {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

type ScriptReply = [number, number, string, string, number, string];

interface GcraCommand {
  sovereignGcra(change: string, other: string, limit: number, cost: number, otherLimit: number, mode: string): Promise<ScriptReply>;
}

/** "{key_abc}:r" → the prefix, then a hash tag of the key id, so both buckets of a key share a cluster slot. */
function redisKey(prefix: string, bucket: string): string {
  const colon = bucket.indexOf(':');
  return `${prefix}{${bucket.slice(colon + 1)}}:${bucket.slice(0, colon)}`;
}

export class RedisLimitStore implements LimitStore {
  readonly kind = 'redis';
  private redis: (Redis & GcraCommand) | null = null;
  private lastError: string | null = 'connecting';
  /** Set by close(): the connection's end is then expected, not reported. */
  private closing = false;

  constructor(
    private readonly options: RedisLimitOptions,
    private readonly log: Log,
  ) {}

  /**
   * Connects; resolves whether or not the connection succeeded (the client keeps trying, and health says so). Throws
   * only when the password file cannot be read: a configuration error, for the start to report.
   */
  async start(): Promise<void> {
    let password: string | undefined;
    if (this.options.passwordFile) {
      try {
        password = readFileSync(this.options.passwordFile, 'utf8').trim();
      } catch (err) {
        throw new Error(
          `cannot read limits.redis.passwordFile '${this.options.passwordFile}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        );
      }
    }
    const redis = new Redis(this.options.url, {
      ...(password ? { password } : {}),
      lazyConnect: true,
      // Fail at once while disconnected (the call gets 503), rather than queueing calls behind a dead connection.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: this.options.timeoutMs,
      connectTimeout: Math.max(this.options.timeoutMs, 1000),
      retryStrategy: (times) => Math.min(100 * times, 2000),
    }) as Redis & GcraCommand;
    redis.defineCommand('sovereignGcra', { numberOfKeys: 2, lua: GCRA_SCRIPT });
    redis.on('ready', () => {
      if (this.lastError) this.log.info({ limiter: 'redis' }, 'the shared rate limiter is connected');
      this.lastError = null;
    });
    redis.on('close', () => {
      if (this.closing) return;
      if (!this.lastError) this.log.warn({ limiter: 'redis' }, 'the connection to the shared rate limiter closed');
      this.lastError ??= 'the connection closed';
    });
    redis.on('error', (err: Error) => {
      const message = (err as NodeJS.ErrnoException).code ?? err.message;
      if (this.lastError !== message) this.log.warn({ limiter: 'redis', err: message }, 'the shared rate limiter is not reachable');
      this.lastError = message;
    });
    this.redis = redis;
    try {
      await redis.connect();
    } catch {
      // Reported by the 'error' handler; the retry strategy goes on.
    }
  }

  async consume(change: Bucket, cost: number, other: Bucket): Promise<PairDecision> {
    return this.run(change, cost, other, 'consume');
  }

  async adjust(bucket: Bucket, delta: number): Promise<void> {
    await this.run(bucket, delta, bucket, 'adjust');
  }

  problem(): string | null {
    return this.lastError ? `the shared rate limiter (Redis) is not reachable: ${this.lastError}` : null;
  }

  async close(): Promise<void> {
    this.closing = true;
    this.redis?.disconnect();
  }

  private async run(change: Bucket, cost: number, other: Bucket, mode: 'consume' | 'adjust'): Promise<PairDecision> {
    if (!this.redis) throw new Error('the shared rate limiter is not started');
    const prefix = this.options.keyPrefix;
    const [allowed, remaining, reset, retry, otherRemaining, otherReset] = await this.redis.sovereignGcra(
      redisKey(prefix, change.name),
      redisKey(prefix, other.name),
      change.limit,
      cost,
      other.limit,
      mode,
    );
    const retryMs = Number(retry);
    const changed: Decision = {
      allowed: allowed === 1,
      limit: change.limit,
      remaining,
      resetMs: Number(reset),
      retryAfterMs: retryMs < 0 ? Infinity : retryMs,
    };
    const read: Decision = { allowed: true, limit: other.limit, remaining: otherRemaining, resetMs: Number(otherReset), retryAfterMs: 0 };
    return { changed, other: read };
  }
}
