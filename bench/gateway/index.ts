// bench:gateway: what a full sovereign pipeline costs next to a plain gateway, measured side by side in one run.
//
// The targets answer the same chat call (a bilingual prompt holding an IBAN, a national ID and a card number):
//   1. upstream: an OpenAI-shaped echo server that answers at once (the floor of every gateway);
//   2. bare: the daemon's stack (fastify over HTTPS, undici) proxying to it with none of the pipeline
//      (bare-proxy.ts): what any pipeline built on this stack starts from;
//   3. sovereign: `sovereign serve` in the cloud posture (HTTPS, auth, per-key limits with a high ceiling,
//      scrubbing of the prompt and the answer, an audit entry flushed to disk before each response, checkpoints
//      signed every second) routing the model to that upstream;
//   4. portkey: the Portkey gateway from npm (@portkey-ai/gateway), plain HTTP, routing to the same upstream;
//   5. haproxy, only when asked for (`--targets`): HAProxy, a proxy hop written in C, over HTTPS to the same
//      upstream (servers.ts): what this machine lets a hop add at all;
//   6. cloud-postgres, only when asked for: the daemon of `sovereign`, configured the same, but with `store:
//      "postgres"` against a PostgreSQL 15 the bench starts on loopback (postgres.ts): what the shared store costs a
//      call next to lmdb, with PostgreSQL's own CPU time during its windows.
// Each is measured buffered and streamed, at fixed rates (open loop, see load.ts) and at saturation (autocannon).
// Everything runs in a private network namespace with loopback only (unshare --net), so no process here can reach
// anything but the others.
import { execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { appendResult } from '../results.js';
import { addedP99Goal, keptUp, median, roundRatio } from './goals.js';
import { paced, pooled, saturate, type LoadResult, type Target } from './load.js';
import { postgresCpuTicks, startBenchPostgres } from './postgres.js';
import { pipelineProfileReport, profileClock, type ProfileWindow } from './profile.js';
import {
  bareProxyArgs,
  benchModelReady,
  BIN,
  certificate,
  chatBody,
  enterPrivateNetwork,
  freePort,
  HEAP_FLAGS,
  ROOT,
  sovereignSetup,
  spawnServer,
  startEchoUpstream,
  startHaproxy,
  stopServer,
  measuringDone,
  waitFor as waitUntilReady,
  workDir,
} from './servers.js';

const { values } = parseArgs({
  options: {
    rates: { type: 'string', default: '1000,2000' },
    seconds: { type: 'string', default: '8' },
    'rate-seconds': { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '15' },
    connections: { type: 'string', default: '50' },
    targets: { type: 'string', default: 'upstream,bare,sovereign,portkey' },
    modes: { type: 'string', default: 'buffered,streamed' },
    'host-network': { type: 'boolean', default: false },
    profile: { type: 'string' },
    'journal-dir': { type: 'string' },
  },
});

// Everything runs inside a network namespace of our own (unless told not to).
enterPrivateNetwork(values['host-network'], 'bench:gateway');

/** A positive number given on the command line, or an error that names the option. */
function positive(option: string, text: string): number {
  const value = Number(text);
  if (!(value > 0) || !Number.isFinite(value)) throw new Error(`--${option} takes numbers above 0, not '${text}'`);
  return value;
}
const rates = [...new Set(values.rates.split(',').map((rate) => positive('rates', rate)))];
const seconds = positive('seconds', values.seconds);
const pacedSeconds = positive('rate-seconds', values['rate-seconds']);
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a whole number of at least 1, not '${values.rounds}'`);
const warmup = positive('warmup', values.warmup);
const connections = Math.ceil(positive('connections', values.connections));
const targetNames = values.targets.split(',');
const KNOWN_TARGETS = ['upstream', 'bare', 'sovereign', 'portkey', 'haproxy', 'cloud-postgres'];
for (const name of targetNames)
  if (!KNOWN_TARGETS.includes(name)) throw new Error(`unknown target '${name}': use ${KNOWN_TARGETS.join(', ')}`);
if (values.profile && !(targetNames.includes('sovereign') && targetNames.includes('bare')))
  throw new Error('--profile compares the daemon with the bare proxy: keep sovereign and bare in --targets');
const modes = values.modes.split(',') as Array<'buffered' | 'streamed'>;

const work = workDir('sov-bench-gateway-');
// --journal-dir DIR: the daemon's audit journal in a new directory under DIR (another device: audit.journalDir).
const journalDir = values['journal-dir'] ? mkdtempSync(join(resolve(values['journal-dir']), 'sov-bench-journal-')) : null;
if (journalDir) process.on('exit', () => rmSync(journalDir, { recursive: true, force: true }));

// --- the servers ---
const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
process.stdout.write(
  `bench:gateway: ${rates.join(', ')} requests/s in ${plural(rounds, 'round')} of ${pacedSeconds} s, saturation in ${plural(rounds, 'round')} of ${seconds} s (${connections} connections)\n`,
);
const { child: echoUpstream, base: upstreamBase } = await startEchoUpstream();
const { certFile, keyFile, ca } = certificate(work);
// Only the targets asked for are started: each is a process on the same two cores.
const wanted = (name: string) => targetNames.includes(name);
const SERVERS: Record<string, ChildProcess> = { upstream: echoUpstream };
const TARGETS: Record<string, (stream: boolean) => Target> = {
  upstream: (stream) => ({ name: 'upstream', url: `${upstreamBase}/chat/completions`, headers: {}, body: chatBody('echo', stream) }),
};
const agent = new Agent({ connect: { ca } });
const waitFor = (url: string, headers: Record<string, string> = {}, ready?: (body: unknown) => boolean) =>
  waitUntilReady(url, agent, headers, ready);
const ready: Array<Promise<unknown>> = [];

// --profile DIR: the daemon and the bare proxy each write a V8 CPU profile when they stop (the whole run, warm-ups
// included), in DIR/sovereign and DIR/bare, so the two can be compared function by function: what the daemon spends
// and the bare proxy does not is the pipeline. Node refuses --cpu-prof in NODE_OPTIONS, so the daemon is then started
// as bin/sovereign starts it, with the flag added.
const profileDir = values.profile ? resolve(values.profile) : null;
const profileFlags = (name: string) => (profileDir ? ['--cpu-prof', `--cpu-prof-dir=${join(profileDir, name)}`] : []);

/** The daemons measured (sovereign, cloud-postgres): each one's base URL, key and config file. */
const DAEMONS = new Map<string, { base: string; auth: Record<string, string>; configFile: string }>();
const daemonTarget = (name: string) => (stream: boolean) => ({
  name,
  url: `${DAEMONS.get(name)!.base}/chat/completions`,
  headers: DAEMONS.get(name)!.auth,
  body: chatBody('bench-chat', stream),
  ca,
});
if (wanted('sovereign')) {
  const port = await freePort();
  const { configFile, secret } = sovereignSetup({ dir: work, port, upstreamBase, certFile, keyFile, journalDir });
  SERVERS.sovereign = profileDir
    ? spawnServer('sovereign', process.execPath, [
        ...HEAP_FLAGS,
        ...profileFlags('sovereign'),
        join(ROOT, 'dist', 'cli', 'main.js'),
        'serve',
        '--config',
        configFile,
      ])
    : spawnServer('sovereign', BIN, ['serve', '--config', configFile]);
  DAEMONS.set('sovereign', { base: `https://127.0.0.1:${port}/v1`, auth: { authorization: `Bearer ${secret}` }, configFile });
  TARGETS.sovereign = daemonTarget('sovereign');
}
// The same daemon, configured the same, with its shared state in PostgreSQL: authentication reads this replica's
// copy in its lmdb, which follows PostgreSQL (notifications and a poll every 200 ms); usage is added there every 5 s.
const postgres = wanted('cloud-postgres') ? await startBenchPostgres() : null;
if (postgres) {
  const port = await freePort();
  const { configFile, secret } = sovereignSetup({
    dir: work,
    port,
    upstreamBase,
    certFile,
    keyFile,
    journalDir,
    name: 'cloud-postgres',
    postgres: { url: postgres.url, passwordFile: postgres.passwordFile },
  });
  SERVERS['cloud-postgres'] = spawnServer('cloud-postgres', BIN, ['serve', '--config', configFile]);
  DAEMONS.set('cloud-postgres', { base: `https://127.0.0.1:${port}/v1`, auth: { authorization: `Bearer ${secret}` }, configFile });
  TARGETS['cloud-postgres'] = daemonTarget('cloud-postgres');
}
if (wanted('portkey')) {
  const port = await freePort();
  SERVERS.portkey = spawnServer(
    'portkey',
    process.execPath,
    [join(ROOT, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js'), `--port=${port}`, '--headless'],
    {
      NODE_ENV: 'production',
    },
  );
  const portkeyBase = `http://127.0.0.1:${port}/v1`;
  ready.push(waitFor(`http://127.0.0.1:${port}/`));
  TARGETS.portkey = (stream) => ({
    name: 'portkey',
    url: `${portkeyBase}/chat/completions`,
    headers: { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': upstreamBase, authorization: 'Bearer sk-bench-upstream' },
    body: chatBody('echo', stream),
  });
}
if (wanted('bare')) {
  const port = await freePort();
  SERVERS.bare = spawnServer(
    'the bare proxy',
    process.execPath,
    bareProxyArgs(port, upstreamBase, certFile, keyFile, profileFlags('bare')),
    {
      TS_NODE_TRANSPILE_ONLY: '1',
    },
  );
  const bareBase = `https://127.0.0.1:${port}/v1`;
  ready.push(waitFor(`https://127.0.0.1:${port}/health`));
  TARGETS.bare = (stream) => ({ name: 'bare', url: `${bareBase}/chat/completions`, headers: {}, body: chatBody('bench-chat', stream), ca });
}
if (wanted('haproxy')) {
  const port = await freePort();
  SERVERS.haproxy = startHaproxy(work, port, upstreamBase, certFile, keyFile);
  const haproxyBase = `https://127.0.0.1:${port}/v1`;
  ready.push(waitFor(`${haproxyBase}/models`));
  TARGETS.haproxy = (stream) => ({
    name: 'haproxy',
    url: `${haproxyBase}/chat/completions`,
    headers: {},
    body: chatBody('echo', stream),
    ca,
  });
}
await Promise.all([waitFor(`${upstreamBase}/models`), ...ready]);
/** Each daemon's audit entries before the first call. */
const entriesBefore = new Map<string, number>();
for (const [name, daemon] of DAEMONS) {
  const health = (await waitFor(`${daemon.base}/health`, daemon.auth, benchModelReady)) as { audit: { entries: number } };
  entriesBefore.set(name, health.audit.entries);
}

/**
 * A load result with the target process's CPU time (user and system, every thread): in all, and per answered call, in
 * ms; and, when the bench runs PostgreSQL, that of PostgreSQL's processes in the same window.
 */
type Result = LoadResult & { cpuMs: number; cpuPerCall: number; pgCpuMs: number; pgCpuPerCall: number };
interface Measured {
  /** Each fixed rate's windows, one per round, pooled. */
  rates: Map<number, Result>;
  /** Each fixed rate's windows, one per round, in order. */
  rateRounds: Map<number, Result[]>;
  /** The round with the median rate. */
  saturation: Result;
  /** Requests/s in each saturation round, in order. */
  rounds: number[];
  /** Each saturation round's result, in order. */
  saturations: Result[];
}

const TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
/** CPU seconds a process has used so far (utime + stime from /proc). */
function cpuSeconds(pid: number): number {
  return cpuTicks(pid) / TICKS_PER_SECOND;
}
/** utime + stime from /proc, in clock ticks. */
function cpuTicks(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}
/** PostgreSQL's CPU seconds so far, every process of it (postgres.ts); NaN without it. */
function postgresCpuSeconds(): number {
  const pid = postgres?.pid();
  return pid ? postgresCpuTicks(pid) / TICKS_PER_SECOND : NaN;
}
async function measure(name: string, run: () => Promise<LoadResult>): Promise<Result> {
  const pid = SERVERS[name].pid!;
  const before = cpuSeconds(pid);
  const pgBefore = postgresCpuSeconds();
  const result = await run();
  const cpuMs = (cpuSeconds(pid) - before) * 1000;
  const pgCpuMs = (postgresCpuSeconds() - pgBefore) * 1000;
  return { ...result, cpuMs, cpuPerCall: cpuMs / Math.max(1, result.ok), pgCpuMs, pgCpuPerCall: pgCpuMs / Math.max(1, result.ok) };
}
/** Fixed-rate windows of one target at one rate as one result: every request counts. */
function pooledResult(windows: Result[]): Result {
  const cpuMs = windows.reduce((n, w) => n + w.cpuMs, 0);
  const pgCpuMs = windows.reduce((n, w) => n + w.pgCpuMs, 0);
  const all = pooled(windows);
  return { ...all, cpuMs, cpuPerCall: cpuMs / Math.max(1, all.ok), pgCpuMs, pgCpuPerCall: pgCpuMs / Math.max(1, all.ok) };
}
/**
 * Waits (at most 15 s) until a target's process has used under a tenth of a core for 100 ms: a target that fell
 * behind (Portkey at 2,000/s) goes on answering calls its client has given up on, which the next window would pay for.
 */
async function quiet(name: string): Promise<void> {
  const pid = SERVERS[name].pid!;
  const until = Date.now() + 15_000;
  // A clock tick is 1/CLK_TCK s of CPU (10 ms here), so no tick in 100 ms is under a tenth of a core.
  for (let before = cpuTicks(pid); Date.now() < until;) {
    await new Promise((r) => setTimeout(r, 100));
    const now = cpuTicks(pid);
    if (now === before) return;
    before = now;
  }
  process.stdout.write(` (${name} still busy after 15 s)`);
}
const results = new Map<string, Map<string, Measured>>();
/** The saturation windows of the first mode run (buffered by default), for --profile's report. */
const profileWindows: { sovereign: ProfileWindow[]; bare: ProfileWindow[] } = { sovereign: [], bare: [] };
/** Calls each daemon answered 200, warm-ups included: each must be in its audit log (and cloud-postgres's billed). */
const answered = new Map<string, number>();
const countCalls = (name: string, r: LoadResult) => {
  if (DAEMONS.has(name)) answered.set(name, (answered.get(name) ?? 0) + r.ok);
  return r;
};

const unanswered: string[] = [];

/** Null when the target answers one call completely; otherwise what it answered instead. */
async function probeCall(target: Target): Promise<string | null> {
  const res = await request(target.url, {
    method: 'POST',
    headers: { ...target.headers, 'content-type': 'application/json' },
    body: target.body,
    dispatcher: agent,
  });
  const text = await res.body.text();
  const stream = (JSON.parse(target.body) as { stream?: boolean }).stream === true;
  if (res.statusCode === 200 && (stream ? text.endsWith('data: [DONE]\n\n') : text.startsWith('{"id"'))) return null;
  return `status ${res.statusCode}, body ${JSON.stringify(text.slice(0, 120))}`;
}

for (const mode of modes) {
  const byTarget = new Map<string, Measured>();
  results.set(mode, byTarget);
  const loaded: Array<[string, Target]> = [];
  for (const name of targetNames) {
    const target = TARGETS[name](mode === 'streamed');
    // One call first: a target that cannot answer this kind of call is reported, not loaded.
    const probe = await probeCall(target);
    if (probe) {
      process.stdout.write(`  ${mode.padEnd(8)} ${name.padEnd(9)} not measured: ${probe}\n`);
      unanswered.push(`${mode} ${name}: ${probe}`);
      continue;
    }
    // Each target is first loaded at saturation for `warmup` seconds, not measured: a freshly started Node server
    // (the daemon, Portkey) serves about half its steady rate until V8 has optimised its hot path, which takes
    // some 10-15 s of load here.
    process.stdout.write(`  ${mode.padEnd(8)} ${name.padEnd(9)} warm-up\n`);
    const warm = countCalls(name, await saturate(target, warmup, connections));
    if (warm.ok === 0) throw new Error(`${name} answered no call during its warm-up (${warm.failed} failed)`);
    await quiet(name);
    loaded.push([name, target]);
  }
  // Fixed rates in rounds too, the targets taking turns at each rate: a p99 is set by the slowest 1%, and a stall of
  // this machine in one window (the floor's or a target's) moved a single window's added p99 by several ms either
  // way. Every round's requests count: each row pools the target's windows at that rate.
  const rateWindows = new Map(loaded.map(([name]) => [name, new Map(rates.map((rate) => [rate, [] as Result[]]))]));
  for (let round = 1; round <= rounds; round++) {
    process.stdout.write(`  ${mode.padEnd(8)} fixed rates, round ${round} of ${rounds}:`);
    for (const rate of rates) {
      process.stdout.write(` ${rate}/s`);
      for (const [name, target] of loaded) {
        const windows = rateWindows.get(name)!.get(rate)!;
        // A target that could not keep this rate in a round (Portkey at 2,000/s) is not loaded at it again: more
        // windows would only measure how long its queue grows in 5 s, and cost the run the time to drain it.
        if (windows.some((w) => !keptUp(w, rate))) continue;
        windows.push(await measure(name, async () => countCalls(name, await paced(target, rate, pacedSeconds, connections))));
        await quiet(name);
      }
    }
    process.stdout.write('\n');
  }
  // Saturation in rounds, the targets taking turns within each: this machine's speed drifts by tens of percent over
  // a minute (other tenants, the host), so targets measured back to back, several times, compare fairly where one
  // window each would not. Each row shows the round with the median rate; ratios are the median of each round's.
  const saturated = new Map<string, Result[]>(loaded.map(([name]) => [name, []]));
  for (let round = 1; round <= rounds; round++) {
    process.stdout.write(`  ${mode.padEnd(8)} saturation, round ${round} of ${rounds}:`);
    for (const [name, target] of loaded) {
      process.stdout.write(` ${name}`);
      const start = profileClock();
      const result = await measure(name, async () => countCalls(name, await saturate(target, seconds, connections)));
      saturated.get(name)!.push(result);
      if (mode === modes[0] && (name === 'sovereign' || name === 'bare'))
        profileWindows[name].push({ start, end: profileClock(), calls: result.ok });
    }
    process.stdout.write('\n');
  }
  for (const [name] of loaded) {
    const all = saturated.get(name)!;
    const windows = rateWindows.get(name)!;
    byTarget.set(name, {
      rates: new Map(rates.map((rate) => [rate, pooledResult(windows.get(rate)!)])),
      rateRounds: windows,
      saturation: median(all, (r) => r.rps),
      rounds: all.map((r) => r.rps),
      saturations: all,
    });
  }
}

/** The share of one core PostgreSQL's processes used over some windows (CPU time over wall time). */
function coreShare(windows: Result[]): number {
  return windows.reduce((n, w) => n + w.pgCpuMs, 0) / (1000 * windows.reduce((n, w) => n + w.seconds, 0));
}
/** Every window measured of a target: its fixed-rate windows and its saturation rounds. */
const windowsOf = (m: Measured) => [...[...m.rateRounds.values()].flat(), ...m.saturations];

/** One mode's figures as the report prints them, for the run's record: each target's rows, and the ratios. */
function modeFigures(byTarget: Map<string, Measured>) {
  const floor = byTarget.get('upstream');
  const added = (name: string, r: Result, base: Result | undefined) =>
    base && name !== 'upstream' ? { addedP50: r.p50 - base.p50, addedP99: r.p99 - base.p99 } : {};
  const row = (r: Result) => ({
    rps: r.rps,
    p50: r.p50,
    p99: r.p99,
    failed: r.failed,
    cpuMsPerCall: r.cpuPerCall,
    // PostgreSQL's CPU in the target's windows (the bench's, when it runs one): cloud-postgres's cost there, the idle
    // replica's polls for any other target.
    ...(postgres ? { postgresCpuMsPerCall: r.pgCpuPerCall, postgresCoreShare: coreShare([r]) } : {}),
  });
  const targets = Object.fromEntries(
    [...byTarget].map(([name, m]) => [
      name,
      {
        rates: Object.fromEntries(
          rates.map((rate) => {
            const r = m.rates.get(rate)!;
            const base = floor?.rates.get(rate);
            const baseRounds = floor?.rateRounds.get(rate);
            return [
              rate,
              {
                ...row(r),
                ...added(name, r, base),
                p99ByRound: m.rateRounds
                  .get(rate)!
                  .map((w, i) => (baseRounds && name !== 'upstream' ? w.p99 - (baseRounds[i]?.p99 ?? NaN) : w.p99)),
                p99WithoutFirstSecond: r.steadyP99 - (base && name !== 'upstream' ? base.steadyP99 : 0),
                sendDelayP99: r.sendDelayP99,
              },
            ];
          }),
        ),
        saturation: { ...row(m.saturation), ...added(name, m.saturation, floor?.saturation), rounds: m.rounds },
      },
    ]),
  );
  const ours = byTarget.get('sovereign');
  const theirs = byTarget.get('portkey');
  const stack = byTarget.get('bare');
  const shared = byTarget.get('cloud-postgres');
  return {
    targets,
    sovereignOverPortkey: ours && theirs ? roundRatio(ours.rounds, theirs.rounds) : null,
    cloudPostgresOverSovereign: ours && shared ? roundRatio(shared.rounds, ours.rounds) : null,
    bareOverPortkey: stack && theirs ? roundRatio(stack.rounds, theirs.rounds).ratio : null,
    pipelineCpuMsPerCall: ours && stack ? ours.saturation.cpuPerCall - stack.saturation.cpuPerCall : null,
  };
}

// --- report ---
const ms = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : '—');
const nameWidth = Math.max(10, ...targetNames.map((name) => name.length));
const row = (cells: string[]) => `${cells.map((c, i) => (i < 2 ? c.padEnd(i === 0 ? nameWidth : 12) : c.padStart(10))).join(' ')}\n`;
const goals: string[] = [];
/** Each goal judged, by name, for the run's record: met or not, and the figure it was judged on. */
const goalFigures: Record<string, { met: boolean; value: unknown }> = {};
for (const [mode, byTarget] of results) {
  process.stdout.write(`\n${mode}\n`);
  process.stdout.write(row(['target', 'load', 'req/s', 'p50 ms', 'p99 ms', '+p50 ms', '+p99 ms', 'failed', 'cpu ms/call']));
  const floor = byTarget.get('upstream');
  for (const rate of [...rates, 0]) {
    for (const [name, measured] of byTarget) {
      const r = rate ? measured.rates.get(rate)! : measured.saturation;
      const base = floor && (rate ? floor.rates.get(rate) : floor.saturation);
      const added = (p: 'p50' | 'p99') => (base && name !== 'upstream' ? ms(r[p] - base[p]) : '');
      process.stdout.write(
        row([
          name,
          rate ? `${rate}/s` : 'saturation',
          r.rps.toFixed(0),
          ms(r.p50),
          ms(r.p99),
          added('p50'),
          added('p99'),
          String(r.failed),
          r.cpuPerCall.toFixed(3),
        ]),
      );
    }
  }
  if (rounds > 1) {
    for (const rate of rates) {
      const base = floor?.rateRounds.get(rate);
      const list = [...byTarget]
        .filter(([name]) => name !== 'upstream')
        .map(
          ([name, m]) =>
            `${name} ${m.rateRounds
              .get(rate)!
              .map((r, i) => (base?.[i] ? ms(r.p99 - base[i].p99) : base ? '—' : ms(r.p99)))
              .join(', ')}`,
        );
      if (list.length) process.stdout.write(`${base ? 'added ' : ''}p99 by round at ${rate}/s (ms): ${list.join('; ')}\n`);
    }
  }
  // Every window starts after a pause, and the first second after one is often slower on this machine: the same
  // windows without it say how much of the tail is that second. The goals are judged on the whole windows.
  if (rates.length && pacedSeconds > 1) {
    const list = rates.map((rate) => {
      const base = floor?.rates.get(rate);
      const each = [...byTarget]
        .filter(([name]) => !base || name !== 'upstream')
        .map(([name, m]) => `${name} ${ms(m.rates.get(rate)!.steadyP99 - (base?.steadyP99 ?? 0))}`);
      return `at ${rate}/s ${each.join(', ')}`;
    });
    process.stdout.write(`${floor ? 'added ' : ''}p99 without each window's first second (ms): ${list.join('; ')}\n`);
  }
  // The load generator's own punctuality, part of every fixed-rate latency above (they run from the due time).
  const sendDelays = [...byTarget].map(([name, m]) => {
    const windows = [...m.rates.values()];
    return `${name} ${ms(Math.max(...windows.map((r) => r.sendDelayP99)))} (${ms(Math.max(...windows.map((r) => r.sendDelayMax)))})`;
  });
  if (rates.length)
    process.stdout.write(`fixed rates, requests sent late by at most (ms, p99 of a window, and the latest): ${sendDelays.join(', ')}\n`);
  const ours = byTarget.get('sovereign');
  const theirs = byTarget.get('portkey');
  if (byTarget.size && rounds > 1) {
    const list = [...byTarget].map(([name, m]) => `${name} ${m.rounds.map((r) => r.toFixed(0)).join(', ')}`);
    process.stdout.write(`saturation rounds (requests/s): ${list.join('; ')}\n`);
  }
  if (ours && theirs) {
    const { ratio, each } = roundRatio(ours.rounds, theirs.rounds);
    process.stdout.write(
      `sovereign / portkey at saturation: ${ratio.toFixed(2)}x requests/s (median of rounds: ${each.map((x) => `${x.toFixed(2)}x`).join(', ')}), p50 ${ms(ours.saturation.p50)} vs ${ms(theirs.saturation.p50)} ms\n`,
    );
    goals.push(`${mode}: saturation at least 5x Portkey's: ${ratio >= 5 ? 'met' : 'NOT met'} (${ratio.toFixed(2)}x)`);
    goalFigures[`${mode}.saturationAtLeast5xPortkey`] = { met: ratio >= 5, value: ratio };
  }
  const stack = byTarget.get('bare');
  if (ours && stack) {
    const pipeline = ours.saturation.cpuPerCall - stack.saturation.cpuPerCall;
    process.stdout.write(
      `the pipeline's own CPU per call at saturation (sovereign minus bare): ${pipeline.toFixed(3)} ms` +
        (theirs ? `; bare / portkey: ${roundRatio(stack.rounds, theirs.rounds).ratio.toFixed(2)}x requests/s` : '') +
        '\n',
    );
  }
  const shared = byTarget.get('cloud-postgres');
  if (shared)
    process.stdout.write(
      sharedStoreReport(
        shared,
        ours,
        floor,
        [...byTarget].filter(([name]) => name !== 'cloud-postgres'),
      ),
    );
  if (ours && floor) {
    for (const [rate, limit] of [
      [1000, 1],
      [2000, 2],
    ] as const) {
      const r = ours.rates.get(rate);
      const base = floor.rates.get(rate);
      if (!r || !base) continue;
      const windows = (m: Measured, pooledWindows: Result) => ({ pooled: pooledWindows, rounds: m.rateRounds.get(rate)! });
      const { added, clean, met } = addedP99Goal(windows(ours, r), windows(floor, base), rate, rounds, limit);
      goals.push(
        `${mode}: added p99 under ${limit} ms at ${rate}/s: ${met ? 'met' : 'NOT met'} (${ms(added)} ms${clean ? '' : `; a round fell behind or was not measured: ${r.failed} failed, ${r.rps.toFixed(0)}/s over the rounds`})`,
      );
      goalFigures[`${mode}.addedP99Under${limit}msAt${rate}PerSecond`] = { met, value: added };
    }
  }
}

/**
 * cloud-postgres next to sovereign (lmdb) in the same rounds, at each load: the latency each adds over the floor (or
 * its own, without one), each daemon's CPU per call, and PostgreSQL's CPU per call and share of a core; then what
 * PostgreSQL used while the other targets were measured (the idle replica's polls and flushes).
 */
function sharedStoreReport(
  shared: Measured,
  ours: Measured | undefined,
  floor: Measured | undefined,
  others: Array<[string, Measured]>,
): string {
  const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
  const latency = (r: Result, base: Result | undefined) =>
    base ? `added p50 ${ms(r.p50 - base.p50)}, p99 ${ms(r.p99 - base.p99)} ms` : `p50 ${ms(r.p50)}, p99 ${ms(r.p99)} ms`;
  const lines = [`cloud-postgres (PostgreSQL store)${ours ? ' next to sovereign (lmdb), same rounds' : ''}:`];
  for (const rate of [...rates, 0]) {
    const r = rate ? shared.rates.get(rate)! : shared.saturation;
    const lmdb = ours && (rate ? ours.rates.get(rate)! : ours.saturation);
    const base = floor && (rate ? floor.rates.get(rate) : floor.saturation);
    const parts = [
      rate
        ? `${latency(r, base)}${lmdb ? ` against ${latency(lmdb, base)}` : ''}`
        : `${r.rps.toFixed(0)}/s${
            ours
              ? `, ${roundRatio(shared.rounds, ours.rounds).ratio.toFixed(2)}x sovereign's (rounds: ${roundRatio(shared.rounds, ours.rounds)
                  .each.map((x) => `${x.toFixed(2)}x`)
                  .join(', ')})`
              : ''
          }`,
      `daemon cpu ${r.cpuPerCall.toFixed(3)}${lmdb ? ` against ${lmdb.cpuPerCall.toFixed(3)}` : ''} ms/call`,
      `PostgreSQL ${r.pgCpuPerCall.toFixed(3)} ms/call (${pct(coreShare([r]))} of a core)`,
    ];
    lines.push(`  ${(rate ? `${rate}/s` : 'saturation').padEnd(10)} ${parts.join('; ')}`);
  }
  const idle = others.flatMap(([, m]) => windowsOf(m));
  if (idle.length) lines.push(`  PostgreSQL while the other targets were measured (the idle replica): ${pct(coreShare(idle))} of a core`);
  return `${lines.join('\n')}\n`;
}

// Every call a daemon answered is in its audit log, flushed before the answer left; and cloud-postgres's are billed in
// PostgreSQL (usage is added there every 5 s), so that its figures are those of a daemon that used it.
for (const [name, daemon] of DAEMONS) {
  const after = (await waitFor(`${daemon.base}/health`, daemon.auth)) as {
    audit: { entries: number; latest_checkpoint: { size: number } | null };
  };
  const logged = after.audit.entries - entriesBefore.get(name)!;
  const calls = answered.get(name) ?? 0;
  process.stdout.write(
    `\naudit: ${logged} entries logged; ${calls} calls answered 200 by ${name}; the latest signed checkpoint covers ${after.audit.latest_checkpoint?.size ?? 0}\n`,
  );
  const prefix = name === 'sovereign' ? '' : `${name} `;
  goals.push(`${prefix}audit: every answered call logged: ${logged >= calls ? 'met' : 'NOT met'} (${logged} entries, ${calls} answered)`);
  goalFigures[name === 'sovereign' ? 'audit.everyAnsweredCallLogged' : `${name}.audit.everyAnsweredCallLogged`] = {
    met: logged >= calls,
    value: { logged, answered: calls },
  };
  if (name !== 'cloud-postgres') continue;
  // It adds the counts it holds as it stops: stopped first, its usage is all there (or within the next seconds).
  await Promise.race([stopServer(SERVERS[name]), new Promise((r) => setTimeout(r, 15_000))]);
  let billed = billedCalls(daemon.configFile);
  for (const until = Date.now() + 15_000; billed < calls && Date.now() < until; billed = billedCalls(daemon.configFile))
    await new Promise((r) => setTimeout(r, 1000));
  process.stdout.write(`usage: ${billed} calls billed in PostgreSQL; ${calls} answered 200 by ${name}\n`);
  goals.push(
    `${prefix}usage: every answered call billed in PostgreSQL: ${billed >= calls ? 'met' : 'NOT met'} (${billed} billed, ${calls} answered)`,
  );
  goalFigures[`${name}.usage.everyAnsweredCallBilled`] = { met: billed >= calls, value: { billed, answered: calls } };
}
/** Chat calls billed to the daemon's key, as `sovereign usage export` reads them from the shared state. */
function billedCalls(configFile: string): number {
  return execFileSync(BIN, ['usage', 'export', '--config', configFile, '--format', 'jsonl'], { encoding: 'utf8' })
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { endpoint: string; requests: number })
    .filter((row) => row.endpoint === '/v1/chat/completions')
    .reduce((sum, row) => sum + row.requests, 0);
}
if (unanswered.length)
  process.stdout.write(`\nnot measured (the target failed a single call):\n${unanswered.map((u) => `  ${u}`).join('\n')}\n`);
process.stdout.write(
  goals.length
    ? `\ngoals:\n${goals.map((g) => `  ${g}`).join('\n')}\n`
    : "\ngoals: none judged (they are sovereign's, against upstream and portkey: keep those in --targets)\n",
);
measuringDone();
appendResult(
  'gateway',
  {
    rates,
    rateSeconds: pacedSeconds,
    seconds,
    rounds,
    warmup,
    connections,
    targets: targetNames,
    modes,
    hostNetwork: values['host-network'],
    profile: profileDir !== null,
    journalDir: values['journal-dir'] ?? null,
  },
  { modes: Object.fromEntries([...results].map(([mode, byTarget]) => [mode, modeFigures(byTarget)])), unanswered, goals: goalFigures },
);
await agent.close();
if (profileDir) {
  // A profile is written as its process exits, so let each stop on its own first.
  await Promise.all(
    [SERVERS.sovereign, SERVERS.bare]
      .filter((child) => child.exitCode === null)
      .map((child) => {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        return exited;
      }),
  );
  process.stdout.write(`\nthe CPU profiles are in ${join(profileDir, 'sovereign')} and ${join(profileDir, 'bare')}\n`);
  if (profileWindows.sovereign.length && profileWindows.bare.length) {
    process.stdout.write(
      pipelineProfileReport(profileDir, { sovereign: SERVERS.sovereign.pid!, bare: SERVERS.bare.pid! }, profileWindows, modes[0]),
    );
  }
}
process.exit(0);
