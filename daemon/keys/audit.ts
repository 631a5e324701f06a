// What the audit log says about a key: its public id and settings, never its secret, its hint or a hash.
import type { EntryFields } from '../audit/index.js';
import type { KeyView } from './registry.js';

export function keyCreatedFields(k: KeyView, extra: EntryFields = {}): EntryFields {
  return { key: k.id, project: k.project, name: k.name, rpm: k.rpm, tpm: k.tpm, plan: k.plan, ...extra };
}
