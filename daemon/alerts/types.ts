// An alert as health and the console show it. Plain types that import nothing: the console's web code reads them too
// (daemon/dashboard/wire.ts).

export type AlertCode =
  | 'audit_checkpoint_late'
  | 'audit_signer_degraded'
  | 'storage_unwritable'
  | 'disk_nearly_full'
  | 'model_withdrawn'
  | 'model_failed'
  | 'egress_refused'
  | 'shared_state_stale'
  | 'limiter_unavailable'
  | 'upstream_down'
  | 'prometheus_unavailable';

export interface Alert {
  code: AlertCode;
  severity: 'critical' | 'warning';
  /** What it is about, where there can be several (a model id, an upstream's name). */
  subject: string | null;
  /** What is wrong and what to do, in English (the console words it in the operator's language from code and facts). */
  message: string;
  /** Figures the console shows with the alert (ages in seconds, bytes, counts). */
  facts: Record<string, number | string>;
  /** When it was raised (ISO 8601). */
  since: string;
}
