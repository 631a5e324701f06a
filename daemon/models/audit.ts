// What the audit log says about models brought onto the device: which, with what checksum, from where.
import type { EntryFields } from '../audit/index.js';
import type { BundleImport } from './bundle.js';
import type { ImportResult } from './import.js';

export function modelImportedFields(r: ImportResult): EntryFields {
  return { model: r.id, file: r.file, sha256: r.sha256, size: r.size, pinned: r.pinned };
}

/** A bundle: the key that signed it, when it was made, and each model with what became of it. */
export function bundleImportedFields(r: BundleImport, dir: string): EntryFields {
  return {
    signer: r.fingerprint,
    created: r.created,
    dir,
    models: r.models.map((m) => ({ model: m.id, file: m.file, sha256: m.sha256, outcome: m.outcome })),
  };
}
