export { KeyRegistry, KeysError, type KeyMatch, type KeyRecord, type KeyView, type ProjectRecord } from './registry.js';
export { sameSecret } from './secrets.js';
export { keyCreatedFields } from './audit.js';
