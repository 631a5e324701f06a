export { Gcra, type Decision } from './gcra.js';
export { InFlightGate } from './in-flight.js';
export { KeyLimits, formatDuration, type KeyQuota, type LimitHeaders } from './key-limits.js';
