// What happens to models while the daemon runs, for whoever records it (the audit log's administrative entries).
// `sovereign models import` reports its own outcome: its ImportResult (or ImportError) is the event.
import type { Availability } from './inventory.js';

export type ModelEvent =
  /** What the boot's checks listed, each with the checksum its file was verified against (possibly none). */
  | { type: 'models.served'; models: Array<{ id: string; file: string; sha256: string | null }> }
  /** Verified and listed after the boot, when its file arrived. */
  | { type: 'model.listed'; id: string; file: string; sha256: string | null }
  /** Present but not listed, and why (checksum, header, fit…). Absent files are not reported. */
  | { type: 'model.not_listed'; id: string; state: Availability; reason: string; when: 'boot' | 'rescan' }
  /** Listed, then withdrawn from /v1/models: it failed to load, or its file changed after it was verified. */
  | { type: 'model.withdrawn'; id: string; state: Availability | 'failed'; reason: string; when: 'load' | 'rescan' };

export type ModelEventListener = (event: ModelEvent) => void;
