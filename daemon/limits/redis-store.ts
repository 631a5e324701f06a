// Limits shared by every daemon replica, in Redis (config limits.store = "redis"). Each decision is one Lua script,
// which Redis runs atomically, on the server's own clock (replicas' clocks may differ), so concurrent calls through
// any number of replicas cannot both take the last unit: the limit holds exactly, as it does in one process. The
// algorithm is the same GCRA as gcra.ts (one number per bucket, the theoretical arrival time), and a bucket's key
// expires once it is full again, so idle keys cost Redis nothing. A call's buckets (its key's and its project's, of
// both kinds) share the project's hash tag, so they live in one slot of a cluster.
//
// When Redis does not answer, nothing is admitted (the caller answers 503): limits that cannot be checked are not
// skipped. Health reports it.
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import type { Decision } from './gcra.js';
import type { Bucket, GroupDecision, LimitStore } from './store.js';

// KEYS: the buckets to take from (the first ARGV[1] of them), then the buckets only read. ARGV: that count, the cost,
// the mode ('consume' or 'adjust'), then each bucket's limit. Takes the cost from every bucket to take from if it fits
// in each, else from none. Returns whether it did, then per bucket: whether it had room, remaining units, the time
// until it is full again and (refused) until the cost would fit, -1 for never.
const GCRA_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local period = 60000
local changing = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local adjust = ARGV[3] == 'adjust'
local tats, limits, fits, retries = {}, {}, {}, {}
local all = 1
for i = 1, #KEYS do
  limits[i] = tonumber(ARGV[3 + i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  tats[i] = tat
  fits[i] = 1
  retries[i] = 0
  if i <= changing and not adjust then
    local allowAt = tat + cost * period / limits[i] - period
    if cost > limits[i] then
      fits[i] = 0
      retries[i] = -1
    elseif allowAt > now then
      fits[i] = 0
      retries[i] = allowAt - now
    end
    if fits[i] == 0 then all = 0 end
  end
end
if all == 1 then
  for i = 1, changing do
    local tat = tats[i] + cost * period / limits[i]
    if tat < now then tat = now end
    tats[i] = tat
    if tat > now then
      redis.call('SET', KEYS[i], string.format('%.17g', tat), 'PX', math.ceil(tat - now) + 1000)
    else
      redis.call('DEL', KEYS[i])
    end
  end
end
local out = {all}
for i = 1, #KEYS do
  local step = period / limits[i]
  local remaining = math.floor((now + period - tats[i]) / step + 1e-9)
  if remaining < 0 then remaining = 0 end
  local reset = tats[i] - now
  if reset < 0 then reset = 0 end
  table.insert(out, fits[i])
  table.insert(out, remaining)
  table.insert(out, tostring(reset))
  table.insert(out, tostring(retries[i]))
end
return out
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

/** The script's answer: whether it took, then four values per bucket (see GCRA_SCRIPT). */
type ScriptReply = Array<number | string>;

interface GcraCommand {
  sovereignGcra(numberOfKeys: number, ...keysAndArgs: Array<string | number>): Promise<ScriptReply>;
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
    // The number of keys varies (a key's buckets, and its project's when it has one): given with each call.
    redis.defineCommand('sovereignGcra', { lua: GCRA_SCRIPT });
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

  async consume(change: readonly Bucket[], cost: number, other: readonly Bucket[]): Promise<GroupDecision> {
    return this.run(change, cost, other, 'consume');
  }

  async adjust(buckets: readonly Bucket[], delta: number): Promise<void> {
    await this.run(buckets, delta, [], 'adjust');
  }

  problem(): string | null {
    return this.lastError ? `the shared rate limiter (Redis) is not reachable: ${this.lastError}` : null;
  }

  async close(): Promise<void> {
    this.closing = true;
    this.redis?.disconnect();
  }

  private async run(change: readonly Bucket[], cost: number, other: readonly Bucket[], mode: 'consume' | 'adjust'): Promise<GroupDecision> {
    if (!this.redis) throw new Error('the shared rate limiter is not started');
    const prefix = this.options.keyPrefix;
    const buckets = [...change, ...other];
    const reply = await this.redis.sovereignGcra(
      buckets.length,
      ...buckets.map((b) => prefix + b.name),
      change.length,
      cost,
      mode,
      ...buckets.map((b) => b.limit),
    );
    const decisions = buckets.map((bucket, i): Decision => {
      const at = 1 + i * 4;
      const retryMs = Number(reply[at + 3]);
      return {
        allowed: Number(reply[at]) === 1,
        limit: bucket.limit,
        remaining: Number(reply[at + 1]),
        resetMs: Number(reply[at + 2]),
        retryAfterMs: retryMs < 0 ? Infinity : retryMs,
      };
    });
    return { allowed: Number(reply[0]) === 1, changed: decisions.slice(0, change.length), other: decisions.slice(change.length) };
  }
}
