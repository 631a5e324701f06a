// For bench:gateway --profile: where the pipeline's cost goes. The daemon's and the bare proxy's V8 CPU profiles are
// read over the saturation windows the run measured, and each function's own time (what the profiler saw running in
// it, not in what it called) is divided by the calls answered in those windows. What the daemon spends per call in a
// function, less what the bare proxy spends in the same one, is the pipeline's share there.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** A measured window: monotonic microseconds (the clock V8's profiles use), and the calls answered in it. */
export interface ProfileWindow {
  start: number;
  end: number;
  calls: number;
}

interface CpuProfile {
  nodes: Array<{ id: number; callFrame: { functionName: string; url: string; lineNumber: number } }>;
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

function callsIn(windows: ProfileWindow[]): number {
  return windows.reduce((sum, w) => sum + w.calls, 0);
}

/** Now on the clock V8's profiles are stamped with (CLOCK_MONOTONIC, in microseconds). */
export function profileClock(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/**
 * The main thread's profile of process `pid` in `dir` (Node names them `CPU.<date>.<time>.<pid>.<thread>.<seq>`;
 * thread 0 is the main one, a process with a loader thread writes one for that too), so that a reused directory's
 * older profiles are never read for this run's.
 */
function mainThreadProfile(dir: string, pid: number): CpuProfile {
  const file = readdirSync(dir).find((f) => {
    const parts = f.split('.');
    return f.endsWith('.cpuprofile') && parts[3] === String(pid) && parts[4] === '0';
  });
  if (!file) throw new Error(`process ${pid} wrote no CPU profile of its main thread in ${dir}`);
  return JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
}

/** Where a function lives: a package, a daemon folder, a Node module, or the VM itself. */
function areaOf(url: string, functionName: string): string {
  if (!url) return `(vm) ${functionName}`;
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1];
  if (url.startsWith('node:'))
    return url
      .replace(/^node:internal\//, 'node:')
      .split('/')
      .slice(0, 2)
      .join('/');
  const daemon = /\/dist\/([^/]+)\//.exec(url);
  return daemon ? `daemon/${daemon[1]}` : url.split('/').slice(-2).join('/');
}

/** Microseconds of own time per call, by function and by area, inside the windows. */
function perCall(profile: CpuProfile, windows: ProfileWindow[]) {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const calls = callsIn(windows);
  const byFunction = new Map<string, { area: string; us: number }>();
  let at = profile.startTime;
  let sampled = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i];
    // A sample stands for the time until the next one.
    const span = profile.timeDeltas[i + 1] ?? 0;
    if (!windows.some((w) => at >= w.start && at < w.end)) continue;
    sampled++;
    const frame = frames.get(profile.samples[i])!;
    if (frame.functionName === '(idle)') continue;
    const file = frame.url ? `${frame.url.split('/').slice(-2).join('/')}:${frame.lineNumber + 1}` : '';
    const area = areaOf(frame.url, frame.functionName);
    // The area too: two packages' `dist/index.js:10` are different functions.
    const key = frame.url ? `${frame.functionName || '(anonymous)'} ${area} ${file}` : area;
    const entry = byFunction.get(key) ?? { area, us: 0 };
    entry.us += span / Math.max(1, calls);
    byFunction.set(key, entry);
  }
  if (!sampled) throw new Error('the CPU profile holds no sample inside the measured windows');
  return byFunction;
}

/**
 * The report: busy time per call of each, then the areas and functions where the daemon spends the most more than
 * the bare proxy. The profiler samples wall time, so a function that wakes another process (a socket write) also
 * carries the time this one waited for a core afterwards: on a machine whose cores are all busy, such rows are
 * partly contention.
 */
export function pipelineProfileReport(
  dir: string,
  pids: { sovereign: number; bare: number },
  windows: { sovereign: ProfileWindow[]; bare: ProfileWindow[] },
  /** Which mode's windows these are (buffered or streamed), for the heading. */
  mode: string,
  top = 25,
): string {
  const ours = perCall(mainThreadProfile(join(dir, 'sovereign'), pids.sovereign), windows.sovereign);
  const bare = perCall(mainThreadProfile(join(dir, 'bare'), pids.bare), windows.bare);
  const total = (m: Map<string, { us: number }>) => [...m.values()].reduce((s, e) => s + e.us, 0);
  const diff = (a: Map<string, number>, b: Map<string, number>) =>
    [...new Set([...a.keys(), ...b.keys()])]
      .map((key) => ({ key, ours: a.get(key) ?? 0, bare: b.get(key) ?? 0 }))
      .sort((x, y) => y.ours - y.bare - (x.ours - x.bare));
  const flat = (m: Map<string, { us: number }>) => new Map([...m].map(([k, e]) => [k, e.us]));
  const byArea = (m: Map<string, { area: string; us: number }>) => {
    const areas = new Map<string, number>();
    for (const e of m.values()) areas.set(e.area, (areas.get(e.area) ?? 0) + e.us);
    return areas;
  };
  const row = (r: { key: string; ours: number; bare: number }) =>
    `  ${(r.ours - r.bare).toFixed(1).padStart(7)} ${r.ours.toFixed(1).padStart(7)} ${r.bare.toFixed(1).padStart(7)}  ${r.key.slice(0, 100)}\n`;
  const head = `  ${'more'.padStart(7)} ${'daemon'.padStart(7)} ${'bare'.padStart(7)}  (µs of the event loop per call)\n`;
  return (
    `\nwhere the pipeline's cost goes (${mode} saturation windows: ${callsIn(windows.sovereign)} calls to the daemon, ` +
    `${callsIn(windows.bare)} to the bare proxy)\n` +
    `  busy per call: daemon ${total(ours).toFixed(1)} µs, bare ${total(bare).toFixed(1)} µs\n` +
    `by area:\n${head}${diff(byArea(ours), byArea(bare)).slice(0, top).map(row).join('')}` +
    `by function:\n${head}${diff(flat(ours), flat(bare)).slice(0, top).map(row).join('')}`
  );
}
