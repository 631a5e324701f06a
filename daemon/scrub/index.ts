export { ibanValid, luhnValid } from './checksums.js';
export { cardNetwork, findNumbers, type Redaction, type RedactionType } from './detect.js';
export { noRedactions, ScrubSession, type RedactionCounts } from './session.js';
export { StreamScrubber } from './stream.js';
export { findIbans } from './iban.js';
export { IBAN_REGISTRY } from './iban-registry.js';
export { scannerKind } from './runs.js';
