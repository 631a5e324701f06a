// The JSON the dashboard's API sends that its pages read, defined once for both: web/src/api.ts imports these types
// (type-only, erased by Vite). This module and what it imports MUST stay plain types that import nothing else: the
// web code's compiler (DOM, no Node types) checks every file it reaches.
import type { Alert } from '../alerts/types.js';
import type { EgressHealth } from '../egress/view.js';
import type { KeyView } from '../keys/view.js';

export type { Alert, AlertCode } from '../alerts/types.js';
export type { EgressHealth } from '../egress/view.js';
export type { MetricsSeries, ModelTotals } from '../metrics/types.js';
export type { ProjectRecord } from '../keys/view.js';
export type { UserView } from '../accounts/view.js';

/** A row of GET /keys: the registry's view of the key, and when it last made a call (ISO 8601; null: never). */
export type KeyRow = KeyView & { lastUsedAt: string | null };

export type ChecklistItemId = 'audit_key_in_tpm' | 'model_verified' | 'tls_fingerprint_recorded' | 'first_key' | 'first_verified_receipt';

/** A step of the first-run checklist (GET /overview, administrators). */
export interface ChecklistItem {
  id: ChecklistItemId;
  done: boolean;
  /** The console's page where the step is taken, if it is taken there. */
  page: 'models' | 'keys' | 'audit' | null;
  /** The command that takes it on the device, if one does. */
  command: string | null;
  /** What the step shows: the signer, the fingerprint to record… */
  facts: Record<string, string | number>;
}

/** What GET /overview sends of /v1/health's report: the parts the console reads. */
export interface HealthView {
  status: 'ok' | 'degraded';
  posture: 'device' | 'appliance' | 'cloud' | 'frontier';
  region: string;
  sovereign: boolean;
  uptime_s: number;
  models: Array<{
    id: string;
    capability: string;
    readiness: string;
    upstream?: string;
    frontier?: boolean;
    detail?: string;
    busy?: number;
    waiting?: number;
    waiting_by_tier?: { priority: number; default: number; flex: number };
  }>;
  unavailable_models: Array<{ id: string; capability: string; state: string; reason: string }>;
  audit: {
    entries: number;
    signer: 'tpm' | 'software' | null;
    latest_checkpoint: { seq: number; size: number; time: string } | null;
    problem: string | null;
  } | null;
  egress?: EgressHealth;
  disk?: { used_bytes: number; free_bytes: number; total_bytes: number; full_in_seconds: number | null; sampled_at: string };
  alerts?: Alert[];
}

/** GET /overview: health, the models /v1/models lists, and for administrators the checklist and the alert limits. */
export interface OverviewView {
  health: HealthView;
  listed: string[];
  checklist: ChecklistItem[] | null;
  /** The checkpoint age above which the audit log is late (alerts.checkpointLagSeconds). */
  checkpointLagSeconds: number;
}
