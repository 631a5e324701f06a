// What the dashboard needs from the daemon, and nothing more. The dashboard is served only beside the audit log, the
// usage meter and the store, so every field is required: the HTTP layer builds this from its own deps.
import type { Accounts } from '../accounts/index.js';
import type { AuditService } from '../audit/index.js';
import type { Config } from '../config/index.js';
import type { HealthReport } from '../health/index.js';
import type { KeyRegistry } from '../keys/index.js';
import type { OperatorMetrics } from '../metrics/index.js';
import type { ModelCatalog } from '../models/index.js';
import type { Store } from '../store/index.js';
import type { UsageMeter } from '../usage/index.js';

export interface DashboardDeps {
  config: Config;
  /** Dashboard accounts and their sessions. */
  accounts: Accounts;
  /** Projects and keys, which the dashboard's accounts manage. */
  keys: KeyRegistry;
  /** Every change the dashboard makes is logged here first; the audit pages read it. */
  audit: AuditService;
  /** Calls per key and endpoint, and when each key was last used. */
  usage: UsageMeter;
  /** The data dir's store, for the audit export's checkpoints. */
  store: Store;
  /** The models listed to clients (the overview page). */
  catalog: ModelCatalog;
  /** The device's own counters per minute (the overview's charts). */
  metrics: OperatorMetrics;
  /** The report /v1/health answers, made when asked (the overview page). */
  health(): HealthReport;
}
