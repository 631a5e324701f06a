// The first screen after sign-in: the alerts, whether the box is healthy and why not; for an administrator the
// first-run checklist until it is done, and the device's own figures: per model readiness, calls and tokens per second,
// queue and p95 duration over the last hour and day; the audit log's health; the egress counter's history on sealed
// postures (a flat line is the proof); the disk; redactions by type per day; errors by code. Every chart has its
// numbers in a table for screen readers (chart.tsx).
import { useEffect, useState } from 'preact/hooks';
import { dash, type Alert, type ChecklistItem, type MetricsSeries, type OverviewView, type Session } from '../api.js';
import { TimeSeriesChart, type Series } from '../chart.js';
import { ErrorNote, messageOf } from '../components.js';
import { formatBytes, formatDate, formatDuration, formatNumber, t, type MessageKey } from '../i18n.js';

type Go = (page: 'models' | 'keys' | 'audit') => void;

const PERIODS = [1, 24, 168, 720] as const;
/** How often the screen refreshes itself while open. */
const REFRESH_MS = 15_000;

export function OverviewPage(props: { session: Session; go: Go }) {
  const admin = props.session.user?.role === 'admin';
  const [overview, setOverview] = useState<OverviewView | null>(null);
  const [hours, setHours] = useState<number>(24);
  const [period, setPeriod] = useState<MetricsSeries | null>(null);
  const [hour, setHour] = useState<MetricsSeries | null>(null);
  const [day, setDay] = useState<MetricsSeries | null>(null);
  const [month, setMonth] = useState<MetricsSeries | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);

  useEffect(() => {
    const timer = setInterval(() => setTick((n) => n + 1), REFRESH_MS);
    return () => clearInterval(timer);
  }, []);

  useEffect(() => {
    const load = async () => {
      setOverview(await dash<OverviewView>('GET', '/overview'));
      if (!admin) return;
      // Cheap to ask for: the day and the month are read from the daemon's hourly counts.
      const [h, d, m] = await Promise.all([1, 24, 720].map((n) => dash<MetricsSeries>('GET', `/metrics?hours=${n}`)));
      setHour(h!);
      setDay(d!);
      setMonth(m!);
    };
    load()
      .then(() => setError(null))
      .catch((err) => setError(messageOf(err)));
  }, [tick]);

  useEffect(() => {
    if (!admin) return;
    const known = { 1: hour, 24: day, 720: month }[hours as 1 | 24 | 720];
    if (known) return setPeriod(known);
    // The week: asked for when chosen, and again at each refresh.
    dash<MetricsSeries>('GET', `/metrics?hours=${hours}`)
      .then(setPeriod)
      .catch((err) => setError(messageOf(err)));
  }, [hours, hours === 1 ? hour : hours === 24 ? day : null, month]);

  const health = overview?.health;
  // Degraded when health says so, or when an alert is critical (a late checkpoint, a refused egress…): the status line
  // and the alerts above it never disagree.
  const degraded = health ? health.status !== 'ok' || (health.alerts ?? []).some((a) => a.severity === 'critical') : false;
  return (
    <main id="main">
      <h1>{t('overview.title')}</h1>
      <ErrorNote error={error} />
      {health && (
        <>
          <Alerts alerts={health.alerts ?? []} />
          <p data-testid="status" class={degraded ? 'status degraded' : 'status ok'}>
            {degraded ? t('overview.statusDegraded') : t('overview.statusOk')}
          </p>
          {overview.checklist && <Checklist items={overview.checklist} go={props.go} onChange={() => setTick((n) => n + 1)} />}
          <AuditSummary overview={overview} />
          {admin && hour && day && <ModelsTable overview={overview} hour={hour} day={day} />}
          {health.disk && <DiskSummary disk={health.disk} />}
          {health.egress && (
            <p data-testid="egress-counter">
              {t('overview.egressSinceFirstBoot', { count: health.egress.refused_since_first_boot })}{' '}
              {t('overview.egressSinceBoot', { count: health.egress.refused_since_boot })}
            </p>
          )}
          {admin && (
            <section aria-labelledby="charts-title">
              <h2 id="charts-title">{t('overview.charts')}</h2>
              <label>
                {t('usage.period')}
                <select value={String(hours)} onChange={(e) => setHours(Number(e.currentTarget.value))} data-testid="overview-period">
                  {PERIODS.map((h) => (
                    <option key={h} value={String(h)}>
                      {h === 1
                        ? t('usage.hour')
                        : h % 24 === 0 && h > 24
                          ? t('usage.week', { count: h / 24 })
                          : t('usage.day', { count: h })}
                    </option>
                  ))}
                </select>
              </label>
              {period && <Charts series={period} sealed={Boolean(health.egress)} />}
              {month && <RedactionsPerDay series={month} />}
            </section>
          )}
        </>
      )}
    </main>
  );
}

function Alerts(props: { alerts: Alert[] }) {
  if (!props.alerts.length) return <p data-testid="alerts-none">{t('overview.noAlerts')}</p>;
  return (
    <section aria-labelledby="alerts-title" class="alerts" data-testid="alerts">
      <h2 id="alerts-title">{t('overview.alerts', { count: props.alerts.length })}</h2>
      <ul>
        {props.alerts.map((a) => (
          <li key={`${a.code} ${a.subject ?? ''}`} class={`alert ${a.severity}`} data-testid={`alert-${a.code}`}>
            <strong>{t(`alert.${a.code}` as MessageKey)}</strong>
            {a.subject && (
              <>
                {' '}
                <code dir="ltr">{a.subject}</code>
              </>
            )}
            {' · '}
            {t('overview.alertSince', { when: formatDate(a.since) })}
            <p dir="ltr" lang="en" class="detail">
              {a.message}
            </p>
          </li>
        ))}
      </ul>
    </section>
  );
}

function Checklist(props: { items: ChecklistItem[]; go: Go; onChange: () => void }) {
  const [error, setError] = useState<string | null>(null);
  const left = props.items.filter((i) => !i.done).length;
  if (!left) return null;
  async function recordFingerprint(fingerprint: string) {
    try {
      await dash('POST', '/checklist', { item: 'tls_fingerprint_recorded', fingerprint });
      props.onChange();
    } catch (err) {
      setError(messageOf(err));
    }
  }
  return (
    <section aria-labelledby="checklist-title" class="checklist" data-testid="checklist">
      <h2 id="checklist-title">{t('checklist.title')}</h2>
      <p>{t('checklist.left', { count: left })}</p>
      <ErrorNote error={error} />
      <ol>
        {props.items.map((item) => (
          <li key={item.id} data-testid={`check-${item.id}`} data-done={String(item.done)}>
            <span class={item.done ? 'check done' : 'check'}>{item.done ? t('checklist.done') : t('checklist.todo')}</span>{' '}
            <strong>{t(`checklist.${item.id}` as MessageKey)}</strong>
            {!item.done && (
              <div class="how">
                {item.id === 'tls_fingerprint_recorded' ? (
                  <>
                    <p>{t('checklist.fingerprintHint')}</p>
                    <code dir="ltr" class="fingerprint">
                      {String(item.facts.fingerprint)}
                    </code>{' '}
                    <button type="button" onClick={() => void recordFingerprint(String(item.facts.fingerprint))}>
                      {t('checklist.fingerprintRecorded')}
                    </button>
                  </>
                ) : (
                  <>
                    <p>{t(`checklist.${item.id}.how` as MessageKey)}</p>
                    {item.command && (
                      <p>
                        {t('checklist.command')} <code dir="ltr">{item.command}</code>
                      </p>
                    )}
                    {item.page && (
                      <a
                        href={`/dashboard/${item.page}`}
                        onClick={(e) => {
                          e.preventDefault();
                          props.go(item.page!);
                        }}
                      >
                        {t(`checklist.open.${item.page}` as MessageKey)}
                      </a>
                    )}
                  </>
                )}
              </div>
            )}
          </li>
        ))}
      </ol>
    </section>
  );
}

function AuditSummary(props: { overview: OverviewView }) {
  const audit = props.overview.health.audit;
  if (!audit) return null;
  const latest = audit.latest_checkpoint;
  const seconds = latest ? Math.max(0, (Date.now() - Date.parse(latest.time)) / 1000) : null;
  const age = seconds === null ? null : Math.round(seconds);
  // Compared unrounded, as the daemon's alert compares it.
  const late = seconds !== null && seconds > props.overview.checkpointLagSeconds;
  return (
    <section aria-labelledby="audit-health-title">
      <h2 id="audit-health-title">{t('overview.audit')}</h2>
      <ul class="facts">
        <li>{t('overview.auditEntries', { count: audit.entries })}</li>
        <li data-testid="checkpoint-age" class={late ? 'late' : undefined}>
          {age === null ? t('overview.noCheckpoint') : t('overview.checkpointAge', { age: formatDuration(age) })}
          {late && ` (${t('overview.checkpointLate', { limit: formatDuration(props.overview.checkpointLagSeconds) })})`}
        </li>
        <li>
          {t('overview.signer')}{' '}
          <strong class={audit.signer === 'tpm' ? 'signer tpm' : 'signer software'}>
            {audit.signer === 'tpm'
              ? t('audit.signerTpm')
              : audit.signer === 'software'
                ? t('audit.signerSoftware')
                : t('overview.noSigner')}
          </strong>
        </li>
      </ul>
    </section>
  );
}

/** Per model: ready or not, calls and tokens per second, queue now and at most, p95 over the last hour and day. */
function ModelsTable(props: { overview: OverviewView; hour: MetricsSeries; day: MetricsSeries }) {
  const { health } = props.overview;
  if (!health.models.length) return <p>{t('overview.noModels')}</p>;
  // A quiet box's rates are small fractions: two significant digits, never a misleading 0.
  const rate = (v = 0) =>
    t('units.perSecond', { value: formatNumber(v, v > 0 && v < 1 ? { maximumSignificantDigits: 2 } : { maximumFractionDigits: 1 }) });
  const ms = (v: number | null | undefined) => (v === null || v === undefined ? '—' : t('units.ms', { value: formatNumber(v) }));
  return (
    <section aria-labelledby="models-title">
      <h2 id="models-title">{t('models.served')}</h2>
      <table data-testid="overview-models">
        <thead>
          <tr>
            <th scope="col">{t('models.id')}</th>
            <th scope="col">{t('models.readiness')}</th>
            <th scope="col">{t('overview.callsPerSecond')}</th>
            <th scope="col">{t('overview.tokensPerSecond')}</th>
            <th scope="col">{t('models.queue')}</th>
            <th scope="col">{t('overview.p95Hour')}</th>
            <th scope="col">{t('overview.p95Day')}</th>
          </tr>
        </thead>
        <tbody>
          {health.models.map((m) => {
            const h = props.hour.models[m.id]?.totals;
            const d = props.day.models[m.id]?.totals;
            return (
              <tr key={m.id} data-testid={`overview-model-${m.id}`}>
                <td dir="ltr">{m.id}</td>
                <td>{t(`readiness.${m.readiness}` as MessageKey)}</td>
                <td>{rate(h?.callsPerSecond)}</td>
                <td>{rate(h?.tokensPerSecond)}</td>
                <td>
                  {m.waiting === undefined
                    ? '—'
                    : t('overview.queueNow', { count: m.waiting, max: formatNumber(Math.max(h?.queueMax ?? 0, d?.queueMax ?? 0)) })}
                </td>
                <td>{ms(h?.p95Ms)}</td>
                <td>{ms(d?.p95Ms)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </section>
  );
}

function DiskSummary(props: { disk: NonNullable<OverviewView['health']['disk']> }) {
  const { disk } = props;
  const freePercent = disk.total_bytes ? (disk.free_bytes / disk.total_bytes) * 100 : 0;
  return (
    <section aria-labelledby="disk-title">
      <h2 id="disk-title">{t('overview.disk')}</h2>
      <ul class="facts" data-testid="disk">
        <li>{t('overview.diskUsed', { used: formatBytes(disk.used_bytes) })}</li>
        <li>
          {t('overview.diskFree', {
            free: formatBytes(disk.free_bytes),
            total: formatBytes(disk.total_bytes),
            percent: formatNumber(freePercent / 100, { style: 'percent', maximumFractionDigits: 1 }),
          })}
        </li>
        <li>
          {disk.full_in_seconds === null
            ? t('overview.diskNotFilling')
            : t('overview.diskFullIn', { when: formatDuration(disk.full_in_seconds) })}
        </li>
      </ul>
    </section>
  );
}

const byKey = (record: Record<string, number[]>, label: (key: string) => string): Series[] =>
  Object.keys(record)
    .sort()
    .map((key) => ({ id: key, label: label(key), values: record[key]! }));

function Charts(props: { series: MetricsSeries; sealed: boolean }) {
  const s = props.series;
  const common = { from: s.from, stepSeconds: s.stepSeconds, buckets: s.buckets };
  const models = Object.keys(s.models).sort();
  const perSecond = (values: number[]) => values.map((v) => v / s.stepSeconds);
  return (
    <div class="charts">
      <TimeSeriesChart
        {...common}
        title={t('overview.chartCalls')}
        unit="perSecond"
        series={models.map((id) => ({ id, label: id, values: perSecond(s.models[id]!.calls) }))}
        testId="chart-calls"
      />
      <TimeSeriesChart
        {...common}
        title={t('overview.chartTokens')}
        unit="perSecond"
        series={models.map((id) => ({ id, label: id, values: perSecond(s.models[id]!.tokens) }))}
        testId="chart-tokens"
      />
      <TimeSeriesChart
        {...common}
        title={t('overview.chartP95')}
        unit="ms"
        series={models.map((id) => ({ id, label: id, values: s.models[id]!.p95Ms }))}
        testId="chart-p95"
      />
      <TimeSeriesChart
        {...common}
        title={t('overview.chartQueue')}
        unit="count"
        kind="bars"
        series={models.map((id) => ({ id, label: id, values: s.models[id]!.queue }))}
        testId="chart-queue"
      />
      <TimeSeriesChart
        {...common}
        title={t('overview.chartErrors')}
        unit="count"
        kind="bars"
        stacked
        series={byKey(s.errorCodes, (code) => code)}
        testId="chart-errors"
        empty={t('overview.noErrors')}
      />
      {props.sealed && (
        <TimeSeriesChart
          {...common}
          title={t('overview.chartEgress')}
          unit="count"
          series={[{ id: 'egress', label: t('overview.egressRefused'), values: s.egressRefused }]}
          testId="chart-egress"
          zeroIsData
        />
      )}
      <TimeSeriesChart
        {...common}
        title={t('overview.chartDisk')}
        unit="bytes"
        series={[{ id: 'disk', label: t('overview.disk'), values: s.diskUsed }]}
        testId="chart-disk"
      />
    </div>
  );
}

/** Redactions by type, one bar a day over 30 days: counts only, never values. */
function RedactionsPerDay(props: { series: MetricsSeries }) {
  const s = props.series;
  return (
    <TimeSeriesChart
      from={s.from}
      stepSeconds={s.stepSeconds}
      buckets={s.buckets}
      title={t('overview.chartRedactions')}
      unit="count"
      kind="bars"
      stacked
      series={byKey(s.redactions, (type) => t(`redaction.${type}` as MessageKey))}
      testId="chart-redactions"
      empty={t('overview.noRedactions')}
    />
  );
}
