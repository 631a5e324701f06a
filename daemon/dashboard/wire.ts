// The JSON the dashboard's API sends that its pages read, defined once for both: web/src/api.ts imports these types
// (type-only, erased by Vite). This module and what it imports MUST stay plain types that import nothing else: the
// web code's compiler (DOM, no Node types) checks every file it reaches.
import type { KeyView } from '../keys/view.js';

export type { ProjectRecord } from '../keys/view.js';
export type { UserView } from '../accounts/view.js';
export type { EgressHealth } from '../egress/view.js';

/** A row of GET /keys: the registry's view of the key, and when it last made a call (ISO 8601; null: never). */
export type KeyRow = KeyView & { lastUsedAt: string | null };
