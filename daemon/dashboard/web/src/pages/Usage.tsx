// Usage: calls per key or endpoint over time (a stacked bar chart), and per key and endpoint the calls, errors and rate-limit
// refusals. The table carries the same numbers as the chart, for screen readers and for copying.
import { useEffect, useState } from 'preact/hooks';
import { dash } from '../api.js';
import { ErrorNote, ProjectSelect, messageOf, useProjects } from '../components.js';
import { TimeSeriesChart } from '../chart.js';
import { formatNumber, t } from '../i18n.js';

interface Point {
  minute: string;
  key: string;
  route: string;
  calls: number;
  errors: number;
  limited: number;
}

interface Usage {
  since: string;
  keys: Array<{ id: string; name: string | null; project: string }>;
  series: Point[];
}

const BUCKETS = [1, 5, 15, 30, 60, 180, 360, 720, 1440];

/** Calls per bucket of the period (at most 48 buckets), one series per key or per endpoint, stacked. */
function Chart(props: { usage: Usage; hours: number; by: 'key' | 'route' }) {
  const { usage, hours, by } = props;
  const bucket = BUCKETS.find((b) => (hours * 60) / b <= 48) ?? 1440;
  const start = Math.floor(Date.parse(usage.since) / 60_000 / bucket) * bucket;
  const count = Math.ceil((hours * 60) / bucket) + 1;
  const ids = by === 'key' ? usage.keys.map((k) => k.id) : [...new Set(usage.series.map((p) => p.route))].sort();
  const values = new Map(ids.map((id) => [id, new Array<number>(count).fill(0)]));
  for (const p of usage.series) {
    const i = Math.floor((Date.parse(p.minute) / 60_000 - start) / bucket);
    const row = values.get(by === 'key' ? p.key : p.route);
    if (row && i >= 0 && i < count) row[i]! += p.calls;
  }
  const label = (id: string) => {
    const name = by === 'key' ? usage.keys.find((k) => k.id === id)?.name : null;
    return name ? `${name} (${id})` : id;
  };
  return (
    <TimeSeriesChart
      title={t(by === 'key' ? 'usage.chartLabel' : 'usage.chartLabelRoutes', { count: hours })}
      from={new Date(start * 60_000).toISOString()}
      stepSeconds={bucket * 60}
      buckets={count}
      series={ids.map((id) => ({ id, label: label(id), values: values.get(id)! }))}
      unit="count"
      kind="bars"
      stacked
      testId="usage-chart"
      empty={t('usage.chartEmpty')}
    />
  );
}

export function UsagePage() {
  const [hours, setHours] = useState(24);
  const [by, setBy] = useState<'key' | 'route'>('key');
  const [usage, setUsage] = useState<Usage | null>(null);
  const [error, setError] = useState<string | null>(null);
  const { projects, project, setProject } = useProjects(setError);

  useEffect(() => {
    if (!project) return;
    dash<Usage>('GET', `/usage?project=${encodeURIComponent(project)}&hours=${hours}`)
      .then(setUsage)
      .catch((err) => setError(messageOf(err)));
  }, [project, hours]);

  const rows = new Map<string, { key: string; route: string; calls: number; errors: number; limited: number }>();
  for (const p of usage?.series ?? []) {
    const id = `${p.key} ${p.route}`;
    const row = rows.get(id) ?? { key: p.key, route: p.route, calls: 0, errors: 0, limited: 0 };
    row.calls += p.calls;
    row.errors += p.errors;
    row.limited += p.limited;
    rows.set(id, row);
  }

  return (
    <main id="main">
      <h1>{t('usage.title')}</h1>
      <ErrorNote error={error} />
      <div class="row">
        <ProjectSelect projects={projects} project={project} onChange={setProject} />
        <label>
          {t('usage.period')}
          <select value={String(hours)} onChange={(e) => setHours(Number(e.currentTarget.value))}>
            <option value="1">{t('usage.hour')}</option>
            <option value="24">{t('usage.day', { count: 24 })}</option>
            <option value="168">{t('usage.week', { count: 7 })}</option>
          </select>
        </label>
        <label>
          {t('usage.groupBy')}
          <select value={by} onChange={(e) => setBy(e.currentTarget.value === 'route' ? 'route' : 'key')} data-testid="usage-by">
            <option value="key">{t('usage.byKey')}</option>
            <option value="route">{t('usage.byRoute')}</option>
          </select>
        </label>
      </div>
      {usage && <Chart usage={usage} hours={hours} by={by} />}
      <h2>{t('usage.byEndpoint')}</h2>
      {rows.size === 0 ? (
        <p>{t('usage.none')}</p>
      ) : (
        <table data-testid="usage-table">
          <thead>
            <tr>
              <th scope="col">{t('keys.id')}</th>
              <th scope="col">{t('usage.endpoint')}</th>
              <th scope="col">{t('usage.calls')}</th>
              <th scope="col">{t('usage.errors')}</th>
              <th scope="col">{t('usage.limited')}</th>
            </tr>
          </thead>
          <tbody>
            {[...rows.values()].map((r) => (
              <tr key={`${r.key} ${r.route}`}>
                <td dir="ltr">
                  <code>{r.key}</code>
                </td>
                <td dir="ltr">{r.route}</td>
                <td>{formatNumber(r.calls)}</td>
                <td>{formatNumber(r.errors)}</td>
                <td>{formatNumber(r.limited)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </main>
  );
}
