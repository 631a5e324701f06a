// What the operator should act on, computed by the daemon from its own health: checkpoints late, the signer failing,
// the disk nearly full or not taking writes, a model withdrawn or failed, an outbound attempt refused, the shared state
// or the limiter out of reach, an upstream not answering, the Prometheus endpoint not serving. Health lists them, the
// console shows them at its top, Prometheus exports them. Each alert is raised (logged) when it first appears and
// cleared (logged) when its cause is gone; `since` is when it was raised.
import type { Alert, AlertCode } from './types.js';

export type { Alert, AlertCode } from './types.js';

export interface AlertThresholds {
  /** Age of the newest checkpoint above which it is late. */
  checkpointLagSeconds: number;
  /** Free space of the data directory's filesystem, in percent, under which the disk is nearly full. */
  diskFreePercent: number;
  /** Time until the disk is full at its current rate, in hours, under which it is nearly full. */
  diskFullHours: number;
  /** How long an egress refusal stays an alert, in hours. */
  egressHours: number;
}

/** What alerts are computed from, beside the health report. */
export interface AlertSources {
  thresholds: AlertThresholds;
  disk: () => { free: number; total: number; fullInSeconds: number | null } | null;
  /** Why the Prometheus endpoint does not serve, if it is on and does not. */
  prometheusProblem: () => string | null;
}

/**
 * What alerts are computed from: the parts of health's report they read (daemon/health's HealthReport has them; it is
 * not imported, as health lists the alerts made from it).
 */
export interface AlertInputs {
  uptime_s: number;
  models: Array<{ id: string; readiness: string; detail?: string }>;
  audit: { entries: number; signer: string | null; latest_checkpoint: { time: string } | null; problem: string | null } | null;
  storage?: { writable: boolean; problem: string | null };
  egress?: { last_refused_at: string | null; refused_since_first_boot: number };
  shared_state?: { current: boolean; problem: string | null };
  limiter?: { problem: string | null };
  upstreams?: Array<{ name: string; answering: boolean; problem: string | null; checked_at: string | null }>;
}

type Found = Omit<Alert, 'since'>;

interface Log {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export class AlertBook {
  /** The alerts raised now, by code and subject, with when each was raised. */
  private readonly raised = new Map<string, { code: AlertCode; subject: string | null; since: string }>();
  /** Models withdrawn while this daemon runs (their file changed or went), by id, with why. */
  private readonly withdrawn = new Map<string, string>();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly sources: AlertSources,
    private readonly log: Log,
  ) {}

  /** Re-evaluates every `ms` with `report`, so that alerts are raised and cleared in the log when no one looks. */
  watch(report: () => AlertInputs, ms = 15_000): void {
    // On a timer, nothing would catch a throw but the process: a health source failing must not stop the daemon.
    this.timer = setInterval(() => {
      try {
        report();
      } catch (err) {
        this.log.warn({ err: (err as Error).message }, 'the alerts could not be evaluated; tried again shortly');
      }
    }, ms);
    this.timer.unref();
  }

  modelWithdrawn(id: string, reason: string): void {
    this.withdrawn.set(id, reason);
  }

  modelListed(id: string): void {
    this.withdrawn.delete(id);
  }

  /** The alerts the report shows now, each with when it was raised; raises and clears in the log as they change. */
  evaluate(report: AlertInputs, now = Date.now()): Alert[] {
    const found = this.find(report, now);
    const ids = new Set<string>();
    const out: Alert[] = [];
    for (const alert of found) {
      // A subject (a model id, an upstream's name) may hold any character: the id is JSON, not joined by a separator.
      const id = JSON.stringify([alert.code, alert.subject]);
      ids.add(id);
      let raised = this.raised.get(id);
      if (!raised) {
        raised = { code: alert.code, subject: alert.subject, since: new Date(now).toISOString() };
        this.raised.set(id, raised);
        this.log.warn({ alert: alert.code, subject: alert.subject, severity: alert.severity }, `alert raised: ${alert.message}`);
      }
      out.push({ ...alert, since: raised.since });
    }
    for (const [id, { code, subject }] of [...this.raised]) {
      if (ids.has(id)) continue;
      this.raised.delete(id);
      this.log.info({ alert: code, subject }, 'alert cleared');
    }
    return out.sort((a, b) => (a.severity === b.severity ? a.since.localeCompare(b.since) : a.severity === 'critical' ? -1 : 1));
  }

  private find(report: AlertInputs, now: number): Found[] {
    const { thresholds } = this.sources;
    const out: Found[] = [];
    const add = (code: AlertCode, severity: Alert['severity'], subject: string | null, message: string, facts: Found['facts'] = {}) =>
      out.push({ code, severity, subject, message, facts });

    const audit = report.audit;
    if (audit) {
      if (audit.problem || !audit.signer) {
        add(
          'audit_signer_degraded',
          'critical',
          null,
          `Checkpoints are not being signed: ${audit.problem ?? 'no signer'}. See docs/audit.md.`,
        );
      }
      const latest = audit.latest_checkpoint;
      const age = latest ? (now - Date.parse(latest.time)) / 1000 : audit.entries > 0 ? report.uptime_s : 0;
      if (age > thresholds.checkpointLagSeconds) {
        add(
          'audit_checkpoint_late',
          'critical',
          null,
          `The newest audit checkpoint is ${Math.round(age)} s old (the limit is ${thresholds.checkpointLagSeconds} s): check the signer and the log's health.`,
          { ageSeconds: Math.round(age), limitSeconds: thresholds.checkpointLagSeconds },
        );
      }
    }
    if (report.storage && !report.storage.writable) {
      add('storage_unwritable', 'critical', null, `The data directory takes no writes: ${report.storage.problem ?? 'unknown'}`);
    }
    const disk = this.sources.disk();
    if (disk && disk.total > 0) {
      const freePercent = (disk.free / disk.total) * 100;
      const soon = disk.fullInSeconds !== null && disk.fullInSeconds < thresholds.diskFullHours * 3600;
      if (freePercent < thresholds.diskFreePercent || soon) {
        add(
          'disk_nearly_full',
          freePercent < thresholds.diskFreePercent / 2 ? 'critical' : 'warning',
          null,
          `The data directory's disk has ${freePercent.toFixed(1)}% free${disk.fullInSeconds !== null ? `, full in about ${Math.round(disk.fullInSeconds / 3600)} h at the current rate` : ''}: free space or move the data directory to a larger disk.`,
          { freeBytes: disk.free, totalBytes: disk.total, ...(disk.fullInSeconds !== null ? { fullInSeconds: disk.fullInSeconds } : {}) },
        );
      }
    }
    for (const [id, reason] of this.withdrawn) {
      add('model_withdrawn', 'warning', id, `The model ${id} was withdrawn: ${reason}. Import it again with 'sovereign models import'.`, {
        reason,
      });
    }
    for (const m of report.models) {
      if (m.readiness === 'failed')
        add('model_failed', 'critical', m.id, `The model ${m.id} failed to load: ${m.detail ?? 'see the log'}.`);
    }
    const egress = report.egress;
    if (egress?.last_refused_at && now - Date.parse(egress.last_refused_at) < thresholds.egressHours * 3600_000) {
      add(
        'egress_refused',
        'critical',
        null,
        `An outbound connection was refused at ${egress.last_refused_at} (${egress.refused_since_first_boot} since first boot): something on this device tried to reach the outside. The audit log has each attempt.`,
        { lastRefusedAt: egress.last_refused_at, refused: egress.refused_since_first_boot },
      );
    }
    if (report.shared_state && !report.shared_state.current) {
      add(
        'shared_state_stale',
        'critical',
        null,
        `This replica's copy of the shared state is not current: ${report.shared_state.problem ?? ''}`,
      );
    }
    if (report.limiter?.problem)
      add('limiter_unavailable', 'critical', null, `Per-key limits cannot be checked: ${report.limiter.problem}`);
    for (const u of report.upstreams ?? []) {
      if (!u.answering && u.checked_at)
        add('upstream_down', 'warning', u.name, `The upstream ${u.name} does not answer: ${u.problem ?? ''}`);
    }
    const prometheus = this.sources.prometheusProblem();
    if (prometheus) add('prometheus_unavailable', 'warning', null, `The Prometheus endpoint does not serve: ${prometheus}`);
    return out;
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
