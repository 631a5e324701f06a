// The Prometheus text endpoint (`GET /metrics`, exposition format 0.0.4) for operators who already run Prometheus.
// It is served on its own listener, `metrics.listen`, meant for the internal management network, never on the API's
// address: it needs no key, so it must not be reachable where clients are. Off by default on the sealed postures.
// It exports counts and states only: no key, no project, no value a call carried.
import http from 'node:http';
import type { Alert } from '../alerts/index.js';
import type { HealthReport } from '../health/index.js';
import { LATENCY_BOUNDS_MS, type MetricsTotals } from '../metrics/index.js';

export interface PrometheusSources {
  health: () => HealthReport & { alerts?: Alert[] };
  totals: MetricsTotals;
  disk: () => { used: number; free: number; total: number } | null;
}

/** Connections the endpoint keeps at once. */
export const MAX_CONNECTIONS = 32;

/** A label value escaped as the format asks (backslash, quote, newline). */
const label = (value: string) => value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');

export function prometheusText(sources: PrometheusSources, now = Date.now()): string {
  const lines: string[] = [];
  const family = (name: string, type: 'counter' | 'gauge' | 'histogram', help: string) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  };
  const health = sources.health();

  family('sovereign_up', 'gauge', 'Whether the daemon reports itself ok (1) or degraded (0).');
  lines.push(`sovereign_up ${health.status === 'ok' ? 1 : 0}`);
  family('sovereign_uptime_seconds', 'gauge', 'Seconds since the daemon started.');
  lines.push(`sovereign_uptime_seconds ${health.uptime_s}`);

  family('sovereign_model_ready', 'gauge', 'Whether each served model is loaded and ready (1) or not (0).');
  for (const m of health.models) lines.push(`sovereign_model_ready{model="${label(m.id)}"} ${m.readiness === 'ready' ? 1 : 0}`);
  family('sovereign_model_queue_waiting', 'gauge', 'Calls waiting for each model now.');
  for (const m of health.models)
    if (m.waiting !== undefined) lines.push(`sovereign_model_queue_waiting{model="${label(m.id)}"} ${m.waiting}`);
  family('sovereign_model_busy', 'gauge', 'Calls each model is working on now.');
  for (const m of health.models) if (m.busy !== undefined) lines.push(`sovereign_model_busy{model="${label(m.id)}"} ${m.busy}`);

  const byModel = [...sources.totals.calls].sort(([a], [b]) => a.localeCompare(b));
  family('sovereign_model_calls_total', 'counter', 'Calls to each model that ended, since start.');
  for (const [id, t] of byModel) lines.push(`sovereign_model_calls_total{model="${label(id)}"} ${t.calls}`);
  family('sovereign_model_call_errors_total', 'counter', 'Calls to each model answered with an error, since start.');
  for (const [id, t] of byModel) lines.push(`sovereign_model_call_errors_total{model="${label(id)}"} ${t.errors}`);
  family('sovereign_model_tokens_total', 'counter', 'Tokens each model read (prompt) and generated (completion), since start.');
  for (const [id, t] of byModel) {
    lines.push(`sovereign_model_tokens_total{model="${label(id)}",kind="prompt"} ${t.promptTokens}`);
    lines.push(`sovereign_model_tokens_total{model="${label(id)}",kind="completion"} ${t.completionTokens}`);
  }
  family('sovereign_model_call_duration_seconds', 'histogram', 'How long calls to each model took, from request to end of answer.');
  for (const [id, t] of byModel) {
    let cumulative = 0;
    LATENCY_BOUNDS_MS.forEach((bound, i) => {
      cumulative += t.latency[i] ?? 0;
      lines.push(`sovereign_model_call_duration_seconds_bucket{model="${label(id)}",le="${bound / 1000}"} ${cumulative}`);
    });
    cumulative += t.latency[LATENCY_BOUNDS_MS.length] ?? 0;
    lines.push(`sovereign_model_call_duration_seconds_bucket{model="${label(id)}",le="+Inf"} ${cumulative}`);
    lines.push(`sovereign_model_call_duration_seconds_sum{model="${label(id)}"} ${t.sumMs / 1000}`);
    lines.push(`sovereign_model_call_duration_seconds_count{model="${label(id)}"} ${cumulative}`);
  }

  family('sovereign_errors_total', 'counter', 'Calls on /v1 answered with an error, by error code, since start.');
  for (const [code, n] of [...sources.totals.errorCodes].sort()) lines.push(`sovereign_errors_total{code="${label(code)}"} ${n}`);
  family(
    'sovereign_redactions_total',
    'counter',
    'Personal values replaced before a model saw them or in its answers, by type, since start.',
  );
  for (const [type, n] of [...sources.totals.redactions].sort()) lines.push(`sovereign_redactions_total{type="${label(type)}"} ${n}`);

  if (health.audit) {
    family('sovereign_audit_entries', 'gauge', 'Entries in the audit log.');
    lines.push(`sovereign_audit_entries ${health.audit.entries}`);
    const latest = health.audit.latest_checkpoint;
    if (latest) {
      family('sovereign_audit_checkpoint_age_seconds', 'gauge', 'Age of the newest signed checkpoint.');
      lines.push(`sovereign_audit_checkpoint_age_seconds ${Math.max(0, Math.round((now - Date.parse(latest.time)) / 1000))}`);
    }
    family('sovereign_audit_signer_tpm', 'gauge', 'Whether checkpoints are signed by the TPM (1) or not (0).');
    lines.push(`sovereign_audit_signer_tpm ${health.audit.signer === 'tpm' ? 1 : 0}`);
  }
  if (health.egress) {
    family('sovereign_egress_refused_total', 'counter', 'Outbound connection attempts the egress guard refused, since the first boot.');
    lines.push(`sovereign_egress_refused_total ${health.egress.refused_since_first_boot}`);
  }
  const disk = sources.disk();
  if (disk) {
    family('sovereign_data_dir_bytes', 'gauge', 'Bytes the data directory occupies on disk.');
    lines.push(`sovereign_data_dir_bytes ${disk.used}`);
    family('sovereign_data_dir_free_bytes', 'gauge', "Bytes still free on the data directory's filesystem.");
    lines.push(`sovereign_data_dir_free_bytes ${disk.free}`);
  }
  family('sovereign_alert', 'gauge', 'Each alert the daemon raises now (1), by code, severity and subject.');
  for (const a of health.alerts ?? []) {
    lines.push(`sovereign_alert{code="${a.code}",severity="${a.severity}",subject="${label(a.subject ?? '')}"} 1`);
  }
  return `${lines.join('\n')}\n`;
}

export interface PrometheusListener {
  /** Why it does not serve (the address could not be bound), or null. */
  problem(): string | null;
  /** The address it serves on, once listening. */
  address(): { host: string; port: number } | null;
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` on `host:port`. A failure to bind is reported (health lists it as an alert), not fatal: the API
 * matters more than its metrics.
 */
export function startPrometheus(
  listen: { host: string; port: number },
  sources: PrometheusSources,
  on: { problem: (err: Error) => void; listening: (address: { host: string; port: number }) => void },
): PrometheusListener {
  let problem: string | null = null;
  // Node checks a request's header and request timeouts every connectionsCheckingInterval (30 s by default): a client
  // trickling its headers would hold its connection that long, and many such would hold the daemon's descriptors.
  const server = http.createServer({ connectionsCheckingInterval: 1_000, headersTimeout: 5_000, requestTimeout: 10_000 }, (req, res) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Only /metrics is served here.\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('Use GET.\n');
      return;
    }
    let body: string;
    try {
      body = prometheusText(sources);
    } catch (err) {
      res
        .writeHead(500, { 'content-type': 'text/plain; charset=utf-8' })
        .end(`The metrics could not be gathered: ${(err as Error).message}\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'cache-control': 'no-store' });
    res.end(req.method === 'HEAD' ? undefined : body);
  });
  // A scraper holds no connection open for long; a stalled one is cut.
  server.keepAliveTimeout = 5_000;
  // A few scrapers, not clients: more connections than this at once are closed as they come, so that this listener
  // never takes the file descriptors the API needs.
  server.maxConnections = MAX_CONNECTIONS;
  server.on('error', (err: NodeJS.ErrnoException) => {
    problem = `cannot listen on ${listen.host}:${listen.port}: ${err.code ?? err.message}`;
    on.problem(err);
  });
  server.listen(listen.port, listen.host, () => {
    const a = server.address();
    if (a && typeof a === 'object') on.listening({ host: a.address, port: a.port });
  });
  return {
    problem: () => problem,
    address() {
      const a = server.address();
      return a && typeof a === 'object' ? { host: a.address, port: a.port } : null;
    },
    close: () =>
      new Promise<void>((resolve) => {
        if (!server.listening) return resolve();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
