export { KeyRegistry, KeysError, type KeyRecord, type KeyView, type ProjectRecord } from './registry.js';
