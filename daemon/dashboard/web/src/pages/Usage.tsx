// Usage: calls per key over time (a stacked bar chart), and per key and endpoint the calls, errors and rate-limit
// refusals. The table carries the same numbers as the chart, for screen readers and for copying.
import { useEffect, useState } from 'preact/hooks';
import { dash } from '../api.js';
import { ErrorNote, ProjectSelect, messageOf, useProjects } from '../components.js';
import { currentLang, t } from '../i18n.js';

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

const COLORS = ['#0b5cad', '#c2410c', '#15803d', '#7e22ce', '#b91c1c', '#0f766e', '#a16207', '#4338ca'];
const BUCKETS = [1, 5, 15, 30, 60, 180, 360, 720, 1440];

function Chart(props: { usage: Usage; hours: number; by: 'key' | 'route' }) {
  const { usage, hours, by } = props;
  const bucket = BUCKETS.find((b) => (hours * 60) / b <= 48) ?? 1440;
  const start = Math.floor(Date.parse(usage.since) / 60_000 / bucket) * bucket;
  const count = Math.ceil((hours * 60) / bucket) + 1;
  // The series of the chart: one per key, or one per endpoint.
  const keys = by === 'key' ? usage.keys.map((k) => k.id) : [...new Set(usage.series.map((p) => p.route))].sort();
  const bars = Array.from({ length: count }, () => new Map<string, number>());
  for (const p of usage.series) {
    const i = Math.floor((Date.parse(p.minute) / 60_000 - start) / bucket);
    const bar = bars[i];
    const series = by === 'key' ? p.key : p.route;
    if (bar) bar.set(series, (bar.get(series) ?? 0) + p.calls);
  }
  const max = Math.max(1, ...bars.map((b) => [...b.values()].reduce((a, c) => a + c, 0)));
  const width = 720;
  const height = 200;
  const barWidth = width / count;
  const total = usage.series.reduce((a, p) => a + p.calls, 0);
  const time = (minute: number) =>
    new Intl.DateTimeFormat(currentLang() === 'ar' ? 'ar-SA-u-nu-latn' : 'en-GB', { hour: '2-digit', minute: '2-digit' }).format(
      new Date(minute * 60_000),
    );
  return (
    <figure>
      <svg
        viewBox={`0 0 ${width} ${height + 20}`}
        role="img"
        aria-label={t(by === 'key' ? 'usage.chartLabel' : 'usage.chartLabelRoutes', { total, hours })}
        data-testid="usage-chart"
        class="chart"
      >
        <line x1={0} y1={height} x2={width} y2={height} stroke="#c9d1d9" />
        {bars.map((bar, i) => {
          let y = height;
          return keys.map((key, k) => {
            const calls = bar.get(key) ?? 0;
            if (!calls) return null;
            const h = (calls / max) * (height - 10);
            y -= h;
            return (
              <rect
                key={`${i}-${key}`}
                x={i * barWidth + 1}
                y={y}
                width={Math.max(1, barWidth - 2)}
                height={h}
                fill={COLORS[k % COLORS.length]}
              >
                <title>{`${time(start + i * bucket)} · ${key}: ${calls}`}</title>
              </rect>
            );
          });
        })}
        <text x={0} y={height + 16} font-size="12">
          {time(start)}
        </text>
        <text x={width} y={height + 16} font-size="12" text-anchor="end">
          {time(start + (count - 1) * bucket)}
        </text>
        <text x={4} y={12} font-size="12">
          {t('usage.max', { max })}
        </text>
      </svg>
      <figcaption>
        <ul class="legend">
          {keys.map((id, i) => (
            <li key={id}>
              <span class="swatch" style={{ background: COLORS[i % COLORS.length] }} /> <code>{id}</code>{' '}
              {by === 'key' ? (usage.keys.find((k) => k.id === id)?.name ?? '') : ''}
            </li>
          ))}
        </ul>
      </figcaption>
    </figure>
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
            <option value="24">{t('usage.day')}</option>
            <option value="168">{t('usage.week')}</option>
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
                <td>{r.calls}</td>
                <td>{r.errors}</td>
                <td>{r.limited}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </main>
  );
}
