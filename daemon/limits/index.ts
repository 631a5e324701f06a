export { Gcra, type Decision } from './gcra.js';
export { InFlightGate, InFlightPlace } from './in-flight.js';
export { KeyLimits, LimiterUnavailableError, formatDuration, type KeyQuota, type LimitHeaders } from './key-limits.js';
export { keyLimits, planLimits, type PlanLimits } from './plans.js';
export { MemoryLimitStore, type LimitStore } from './store.js';
export { RedisLimitStore, type RedisLimitOptions } from './redis-store.js';
export { InFlightShares, shareSizes, type FullShare, type ShareSizes } from './shares.js';
