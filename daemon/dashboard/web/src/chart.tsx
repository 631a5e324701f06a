// A time series drawn as SVG: lines or bars (stacked or side by side) over equal time buckets, y ticks in the
// series' unit, x ticks that carry the date when the period crosses midnight, an empty state that keeps the axes,
// and the same numbers in a table that only screen readers see. Time runs left to right (old to new) in Arabic too.
import type { JSX } from 'preact';
import { currentLang, formatBytes, formatDate, formatNumber, t } from './i18n.js';

/** `percent`: values from 0 to 100. */
export type Unit = 'count' | 'perSecond' | 'ms' | 'bytes' | 'percent';
export interface Series {
  id: string;
  label: string;
  values: Array<number | null>;
}

// Every colour has at least 3:1 contrast with the white background (WCAG 1.4.11, non-text contrast).
const COLORS = ['#0b5cad', '#c2410c', '#15803d', '#7e22ce', '#b91c1c', '#0f766e', '#a16207', '#4338ca'];
const WARN = '#a4161a';
const TEXT = '#4a5560';
const WIDTH = 720;
const HEIGHT = 240;
const LEFT = 72;
const RIGHT = 12;
const TOP = 14;
const BOTTOM = 28;
const PLOT_W = WIDTH - LEFT - RIGHT;
const PLOT_H = HEIGHT - TOP - BOTTOM;
const SHORT_TIME: Intl.DateTimeFormatOptions = { hour: '2-digit', minute: '2-digit' };
const DATE_TIME: Intl.DateTimeFormatOptions = { day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit' };

/** A value in its unit: compact on the axis ("1.2K"), exact in tooltips and the table. */
function valueText(v: number, unit: Unit, exact = false): string {
  // Rates of a quiet box are fractions: below 1 they keep two significant digits, or every tick would read 0.
  const small = v !== 0 && Math.abs(v) < 1;
  const digits = small
    ? { maximumSignificantDigits: 2 }
    : exact
      ? { maximumFractionDigits: 2 }
      : ({ notation: 'compact', maximumFractionDigits: 1 } as const);
  switch (unit) {
    case 'bytes':
      return formatBytes(v);
    case 'percent':
      return formatNumber(v / 100, { style: 'percent', maximumFractionDigits: exact ? 2 : 1 });
    case 'ms':
      return t('units.ms', { value: formatNumber(v, digits) });
    case 'perSecond':
      return t('units.perSecond', { value: formatNumber(v, digits) });
    default:
      return formatNumber(v, digits);
  }
}

/** Three steps of a round size (1, 2, 2.5 or 5 times a power of ten) that reach `max`; whole steps for counts. */
function yTicks(max: number, unit: Unit): number[] {
  const raw = max > 0 ? max / 3 : 1;
  const power = 10 ** Math.floor(Math.log10(raw));
  let step = ([1, 2, 2.5, 5, 10].find((m) => m * power >= raw) ?? 10) * power;
  if (unit === 'count') step = Math.max(1, Math.ceil(step));
  return [0, step, 2 * step, 3 * step];
}

/** Per bucket, the top of each series: its value, or with `stacked`, its value on top of the series before it. */
function stack(series: Series[], n: number, stacked: boolean): Array<Array<number | null>> {
  if (!stacked) return series.map((s) => Array.from({ length: n }, (_, i) => s.values[i] ?? null));
  const sums = new Array<number>(n).fill(0);
  return series.map((s) =>
    Array.from({ length: n }, (_, i) => {
      const v = s.values[i];
      if (v == null) return null;
      sums[i]! += v;
      return sums[i]!;
    }),
  );
}

/**
 * Bucket indices spread over the period (five, or four when labels carry the date and so are wider), with their
 * labels; a label equal to an earlier one is dropped.
 */
function xTicks(n: number, timeOf: (i: number) => string, withDates: boolean): Array<{ i: number; label: string }> {
  const count = Math.min(n, withDates ? 4 : 5);
  const indices = [...new Set(Array.from({ length: count }, (_, j) => (count === 1 ? 0 : Math.round((j * (n - 1)) / (count - 1)))))];
  const seen = new Set<string>();
  return indices.flatMap((i) => {
    const label = formatDate(timeOf(i), withDates ? DATE_TIME : SHORT_TIME);
    if (seen.has(label)) return [];
    seen.add(label);
    return [{ i, label }];
  });
}

export function TimeSeriesChart(props: {
  title: string;
  /** ISO start of the first bucket. */
  from: string;
  stepSeconds: number;
  series: Series[];
  unit: Unit;
  kind?: 'line' | 'bars';
  stacked?: boolean;
  testId?: string;
  /** Text shown inside the chart when it has no data. */
  empty?: string;
  /** A threshold line. */
  warnAbove?: number;
  /** Buckets in the period, when no series may carry them (a period with no data still has its time axis). */
  buckets?: number;
  /** Zeros are data (a counter that should stay at zero: its flat line is the point), not an empty chart. */
  zeroIsData?: boolean;
}): JSX.Element {
  const { series, unit, stepSeconds } = props;
  const kind = props.kind ?? 'line';
  const stacked = props.stacked ?? false;
  const n = Math.max(1, props.buckets ?? 0, ...series.map((s) => s.values.length));
  const start = Date.parse(props.from);
  const timeOf = (i: number) => new Date(start + i * stepSeconds * 1000).toISOString();
  const tops = stack(series, n, stacked);
  const hasData = series.some((s) => s.values.some((v) => v != null && (v !== 0 || props.zeroIsData)));
  const max = Math.max(0, props.warnAbove ?? 0, ...tops.flat().map((v) => v ?? 0));
  const ticks = yTicks(max, unit);
  const yMax = ticks[ticks.length - 1]!;
  const y = (v: number) => TOP + PLOT_H - (v / yMax) * PLOT_H;
  const slot = PLOT_W / n;
  const center = (i: number) => LEFT + (i + 0.5) * slot;
  const withDates = new Date(timeOf(0)).toDateString() !== new Date(timeOf(n - 1)).toDateString();
  const period = { from: formatDate(timeOf(0), DATE_TIME), to: formatDate(timeOf(n), DATE_TIME) };
  const emptyText = props.empty ?? t('chart.noData');
  // The axis runs left to right in every language, but each label is text in the page's direction: Chromium lays SVG
  // text out by the inherited CSS direction (the svg's dir attribute does not change it), and text-anchor's start and
  // end follow it. Labels name their direction, and anchors are chosen by side.
  const direction = currentLang() === 'ar' ? 'rtl' : 'ltr';
  const anchor = (side: 'left' | 'right' | 'middle') =>
    side === 'middle' ? side : (side === 'left') === (direction === 'ltr') ? 'start' : 'end';

  let summary: string;
  if (unit === 'count' || unit === 'bytes') {
    const total = series.reduce((a, s) => a + s.values.reduce<number>((b, v) => b + (v ?? 0), 0), 0);
    summary = t('chart.summary', { title: props.title, ...period, total: unit === 'bytes' ? formatBytes(total) : formatNumber(total) });
  } else {
    const latest = series.flatMap((s) => {
      const last = s.values.findLast((v) => v != null);
      return last == null ? [] : [series.length > 1 ? `${s.label} ${valueText(last, unit, true)}` : valueText(last, unit, true)];
    });
    summary = t('chart.summaryLatest', { title: props.title, ...period, latest: latest.join(', ') || emptyText });
  }

  const marks = series.flatMap((s, k) => {
    const color = COLORS[k % COLORS.length]!;
    const own = s.values;
    const top = tops[k]!;
    const tip = (i: number) =>
      `${formatDate(timeOf(i), withDates ? DATE_TIME : SHORT_TIME)} · ${s.label}: ${valueText(own[i] ?? 0, unit, true)}`;
    if (kind === 'bars') {
      const width = stacked ? slot * 0.8 : (slot * 0.8) / series.length;
      return top.map((v, i) => {
        if (v == null || !own[i]) return null;
        const base = stacked ? v - own[i] : 0;
        const x = LEFT + i * slot + slot * 0.1 + (stacked ? 0 : k * width);
        return (
          <rect key={`${s.id}-${i}`} x={x} y={y(v)} width={Math.max(1, width - 1)} height={y(base) - y(v)} fill={color}>
            <title>{tip(i)}</title>
          </rect>
        );
      });
    }
    // A line, broken where a bucket has no value; a lone point gets a dot so that it shows.
    const path = top.map((v, i) => (v == null ? '' : `${top[i - 1] == null ? 'M' : 'L'}${center(i)},${y(v)}`)).join('');
    const dots = top.map((v, i) =>
      v != null && top[i - 1] == null && top[i + 1] == null ? (
        <circle key={`${s.id}-${i}`} cx={center(i)} cy={y(v)} r={3} fill={color} />
      ) : null,
    );
    return [<path key={s.id} d={path} fill="none" stroke={color} stroke-width={2} />, ...dots];
  });

  return (
    <figure class="chart-figure">
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        role="img"
        aria-label={summary}
        data-testid={props.testId}
        class="chart"
        dir="ltr"
        font-size="12"
        fill={TEXT}
      >
        {ticks.map((v) => (
          <g key={v}>
            <line x1={LEFT} x2={WIDTH - RIGHT} y1={y(v)} y2={y(v)} stroke={v ? '#e3e7eb' : '#8a949e'} />
            <text x={LEFT - 6} y={y(v) + 4} text-anchor={anchor('right')} direction={direction}>
              {valueText(v, unit)}
            </text>
          </g>
        ))}
        {xTicks(n, timeOf, withDates).map(({ i, label }, j, all) => (
          <text
            key={i}
            x={center(i)}
            y={HEIGHT - 8}
            text-anchor={anchor(all.length < 2 ? 'middle' : j === 0 ? 'left' : j === all.length - 1 ? 'right' : 'middle')}
            direction={direction}
          >
            {label}
          </text>
        ))}
        {hasData ? (
          marks
        ) : (
          <text
            x={LEFT + PLOT_W / 2}
            y={TOP + PLOT_H / 2}
            text-anchor="middle"
            direction={direction}
            data-testid={props.testId && `${props.testId}-empty`}
          >
            {emptyText}
          </text>
        )}
        {props.warnAbove !== undefined && (
          <line x1={LEFT} x2={WIDTH - RIGHT} y1={y(props.warnAbove)} y2={y(props.warnAbove)} stroke={WARN} stroke-dasharray="6 4">
            <title>{t('chart.threshold', { value: valueText(props.warnAbove, unit) })}</title>
          </line>
        )}
      </svg>
      <figcaption>
        <strong>{props.title}</strong>
        {series.length > 0 && (
          <ul class="legend">
            {series.map((s, k) => (
              <li key={s.id}>
                <span class="swatch" style={{ background: COLORS[k % COLORS.length] }} /> <bdi>{s.label}</bdi>
              </li>
            ))}
          </ul>
        )}
      </figcaption>
      <table class="visually-hidden">
        <caption>{props.title}</caption>
        <thead>
          <tr>
            <th scope="col">{t('chart.time')}</th>
            {series.map((s) => (
              <th scope="col" key={s.id}>
                {s.label}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {Array.from({ length: n }, (_, i) => (
            <tr key={i}>
              <th scope="row">{formatDate(timeOf(i), DATE_TIME)}</th>
              {series.map((s) => {
                const v = s.values[i];
                return <td key={s.id}>{v == null ? '—' : valueText(v, unit, true)}</td>;
              })}
            </tr>
          ))}
        </tbody>
      </table>
    </figure>
  );
}
