// The body of GET /v1/health: what an operator or a load balancer needs to know about this daemon.
import type { Config } from '../config/index.js';
import { isMetered, isSovereign } from '../config/index.js';
import type { LimitStore } from '../limits/index.js';
import type { EngineRegistry, QueueState } from '../engines/index.js';
import { ownedByShown, type ModelCatalog, type Readiness } from '../models/index.js';
import type { AuditHealth, AuditService } from '../audit/index.js';
import type { EgressHealth, EgressService } from '../egress/index.js';
import type { WriteHealth } from '../store/index.js';
import type { Alert } from '../alerts/types.js';
import type { DiskReading } from '../metrics/types.js';

export interface HealthReport {
  status: 'ok' | 'degraded';
  posture: Config['posture'];
  region: string;
  sovereign: boolean;
  uptime_s: number;
  /** `busy` and `waiting`: calls running and queued on a loaded model. */
  models: Array<{
    id: string;
    capability: string;
    readiness: Readiness;
    /** As /v1/models says it: a demo model's says it has random weights, for trying the API. */
    owned_by: string;
    upstream?: string;
    /** false on the frontier posture (every model there is labelled non-sovereign). */
    sovereign?: boolean;
    /** true for a frontier provider's model: calls to it leave the sovereign boundary. */
    frontier?: boolean;
    detail?: string;
    busy?: number;
    waiting?: number;
    /** The waiting calls by service tier, where the engine queues. */
    waiting_by_tier?: { priority: number; default: number; flex: number };
  }>;
  /** Manifest models this device does not serve, and why (missing, checksum, does not fit…). */
  unavailable_models: Array<{ id: string; capability: string; state: string; reason: string }>;
  /** Entries logged, what signs checkpoints (tpm, software, or null when nothing can), the latest checkpoint. */
  audit: AuditHealth | null;
  /** Each configured upstream: whether its last health check answered, why not, when, and calls sent again. */
  upstreams?: UpstreamHealth[];
  /** Metered postures only: where per-key limits are kept (memory or redis), and why they cannot be checked, if so. */
  limiter?: { store: 'memory' | 'redis'; problem: string | null };
  /** Sealed postures only: outbound attempts refused, and the kernel's egress count under systemd. */
  egress?: EgressHealth;
  /**
   * Whether the data directory takes writes: while it does not (a full disk), calls that must write get 503
   * storage_unavailable, and `problem` says what failed, why and what to do, `since` since when.
   */
  storage?: { writable: boolean; problem: string | null; since: string | null };
  /**
   * With `store: "postgres"`: whether this replica's copy of the shared state is current (confirmed by PostgreSQL
   * within the revocation bound). While it is not, calls get 503 shared_state_unavailable and `problem` says why.
   */
  shared_state?: { store: 'postgres'; current: boolean; problem: string | null; since: string | null };
  /** Boots of this data dir, crashes among them, how the last run stopped, and systemd's restart count. */
  service?: BootReport & { systemd: { unit: string; restarts: number | null } | null };
  /**
   * The data directory's size on disk, its filesystem's free space and size, and the seconds until it is full at the
   * rate its free space fell over the last day (null while it is not falling). Sampled once a minute.
   */
  disk?: { used_bytes: number; free_bytes: number; total_bytes: number; full_in_seconds: number | null; sampled_at: string };
  /** What the operator should act on now (daemon/alerts), critical ones first. */
  alerts?: Alert[];
}

/** Boots of this data dir and how the last run stopped, as the service's boot log (service/boots.ts) counts them. */
export interface BootReport {
  boots: number;
  /** Runs that ended without a clean close, over the data dir's life. */
  crashes: number;
  /** How the run before this one ended; null on the first boot. */
  previous_stop: 'clean' | 'crash' | null;
}

export interface UpstreamHealth {
  name: string;
  answering: boolean;
  problem: string | null;
  /** When its last health check ended (ISO 8601), or null before the first. */
  checked_at: string | null;
  /** Tries sent again since start (failures before the first byte). */
  retried: number;
}

/** Where the report comes from (the pipeline's dependencies have all of it). */
export interface HealthSources {
  config: Config;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  state: { startedAt: number };
  audit?: AuditService;
  egress?: EgressService;
  boots?: BootReport;
  limits?: { store: LimitStore };
  upstreams?: { health(): UpstreamHealth[] };
  store?: { writes: WriteHealth; shared?: { staleness(): { problem: string; since: string } | null } | null };
  /** The data directory's newest disk sample (daemon/metrics). */
  metrics?: { disk(): DiskReading | null };
  /** The alerts this report shows (daemon/alerts: computed from the report itself). */
  alerts?: { evaluate(report: HealthReport): Alert[] };
}

function queueOf(state: QueueState | undefined) {
  if (!state) return {};
  return { busy: state.busy, waiting: state.waiting, ...(state.byTier ? { waiting_by_tier: state.byTier } : {}) };
}

export function healthReport(sources: HealthSources): HealthReport {
  const { config, catalog, engines, state, audit, egress, boots } = sources;
  const models = catalog.all().map((m) => ({
    id: m.id,
    capability: m.capability,
    readiness: m.readiness,
    owned_by: ownedByShown(m, isSovereign(config.posture)),
    ...(m.upstream ? { upstream: m.upstream } : {}),
    // On the frontier posture every answer is labelled non-sovereign (X-Sovereign: false, /v1/models), so is every model.
    ...(m.frontier || !isSovereign(config.posture) ? { sovereign: false } : {}),
    ...(m.frontier ? { frontier: true } : {}),
    ...(m.detail ? { detail: m.detail } : {}),
    ...queueOf(engines.queueState(m.id)),
  }));
  const auditHealth = audit?.health() ?? null;
  const limiter =
    isMetered(config.posture) && sources.limits ? { store: sources.limits.store.kind, problem: sources.limits.store.problem() } : null;
  const writes = sources.store?.writes.state;
  const shared = sources.store?.shared;
  const stale = shared?.staleness() ?? null;
  const degraded =
    models.some((m) => m.readiness === 'failed') ||
    Boolean(auditHealth?.problem) ||
    Boolean(limiter?.problem) ||
    Boolean(writes) ||
    Boolean(stale);
  const report: HealthReport = {
    status: degraded ? 'degraded' : 'ok',
    posture: config.posture,
    region: config.region,
    sovereign: isSovereign(config.posture),
    uptime_s: Math.floor((Date.now() - state.startedAt) / 1000),
    models,
    unavailable_models: catalog.unavailable(),
    audit: auditHealth,
  };
  const upstreams = sources.upstreams?.health();
  if (upstreams?.length) report.upstreams = upstreams;
  if (limiter) report.limiter = limiter;
  if (sources.store) report.storage = { writable: !writes, problem: writes?.problem ?? null, since: writes?.since ?? null };
  if (shared) report.shared_state = { store: 'postgres', current: !stale, problem: stale?.problem ?? null, since: stale?.since ?? null };
  const egressHealth = egress?.health();
  if (egressHealth) report.egress = egressHealth;
  if (boots) report.service = { ...boots, systemd: egress?.systemdRestarts() ?? null };
  const disk = sources.metrics?.disk();
  if (disk) {
    report.disk = {
      used_bytes: disk.used,
      free_bytes: disk.free,
      total_bytes: disk.total,
      full_in_seconds: disk.fullInSeconds,
      sampled_at: disk.at,
    };
  }
  if (sources.alerts) report.alerts = sources.alerts.evaluate(report);
  return report;
}
