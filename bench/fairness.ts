// bench:fairness: whether one project flooding a model keeps another waiting, under each scheduling policy
// (scheduling.policy: `fifo`, how the daemon scheduled before, and `fair`), on the tests' tiny generated chat model.
//
// For each policy a daemon of its own (models.parallel 2):
// 1. idle: project B sends short streamed calls one after another; its time to first token (TTFT);
// 2. loaded: project A keeps --flood long generations going (each one replaced as it ends, so its queue stays full),
//    and B sends the same short calls one after another; B's TTFT;
// 3. shares: four projects each keep --flood / 4 generations of --share-tokens going for --seconds; the tokens of the
//    calls each was served in full, and Jain's fairness index over them ((Σx)² / (n·Σx²): 1 when all are equal).
// Goals (fair): B's TTFT p95 loaded within 2x of idle; Jain's index ≥ 0.95.
//
//   npm run bench:fairness [-- --flood 32 --long 256 --share-tokens 32 --calls 20 --phase-seconds 20 --seconds 15
//                              --policies fifo,fair]
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import http from 'node:http';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { writeTinyGguf } from '../daemon/models/tiny/gguf.js';
import { appendResult } from './results.js';

const { values } = parseArgs({
  options: {
    flood: { type: 'string', default: '32' },
    long: { type: 'string', default: '256' },
    'share-tokens': { type: 'string', default: '32' },
    calls: { type: 'string', default: '20' },
    'phase-seconds': { type: 'string', default: '20' },
    seconds: { type: 'string', default: '15' },
    policies: { type: 'string', default: 'fifo,fair' },
  },
});
const flood = Number(values.flood);
const longTokens = Number(values.long);
const shareTokens = Number(values['share-tokens']);
const calls = Number(values.calls);
const phaseMs = Number(values['phase-seconds']) * 1000;
const sharesMs = Number(values.seconds) * 1000;
const named = values.policies.split(',');
for (const p of named) if (p !== 'fifo' && p !== 'fair') throw new Error(`unknown policy '${p}': use fifo, fair`);
const policies = named as Array<'fifo' | 'fair'>;

const root = resolve(import.meta.dirname, '..');
const bin = join(root, 'bin', 'sovereign');
const work = mkdtempSync(join(tmpdir(), 'sov-bench-fairness-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

// The tests' tiny chat model.
const modelPath = join(work, 'tiny-chat.gguf');
const written = writeTinyGguf(modelPath, { seed: 42 });
const manifest = join(work, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({
    models: [
      {
        id: 'tiny-chat',
        file: 'tiny-chat.gguf',
        sha256: createHash('sha256').update(readFileSync(modelPath)).digest('hex'),
        size: statSync(modelPath).size,
        gguf: written.gguf,
        capability: 'chat',
        engine: 'llama.cpp',
        languages: ['ar', 'en'],
        context: 1024,
        servingContext: 1024,
        needs: { ramBytes: 0, vramBytes: 0, gpuRequired: false },
        ownedBy: 'bench',
      },
    ],
  }),
);

function cli(args: string[]): Promise<string> {
  return new Promise((res, rej) => {
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', (code) => (code === 0 ? res(out) : rej(new Error(`${args.join(' ')} exited ${code}`))));
  });
}

interface Daemon {
  url: string;
  keys: Record<string, string>;
  process: ChildProcess;
}

async function startDaemon(policy: 'fifo' | 'fair'): Promise<Daemon> {
  const dataDir = join(work, `data-${policy}`);
  const keys: Record<string, string> = {};
  for (const project of ['A', 'B', 'C', 'D']) {
    await cli(['projects', 'create', project, '--data-dir', dataDir]);
    keys[project] = (
      JSON.parse(await cli(['keys', 'create', '--project', project, '--data-dir', dataDir, '--json'])) as { secret: string }
    ).secret;
  }
  const config = join(work, `config-${policy}.json`);
  writeFileSync(config, JSON.stringify({ models: { parallel: 2, queue: 64 }, scheduling: { policy }, log: { level: 'warn' } }));
  const child = spawn(
    bin,
    ['serve', '--config', config, '--port', '0', '--data-dir', dataDir, '--models-dir', work, '--manifest', manifest, '--json'],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, SOVEREIGN_AUDIT_SIGNER: 'software' } },
  );
  const url = await new Promise<string>((res) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      const event = JSON.parse(line) as { event?: string; url?: string };
      if (event.event === 'listening') res(event.url!);
    });
  });
  for (let ready = false; !ready; await new Promise((r) => setTimeout(r, 100))) {
    const health = (await (await fetch(`${url}/health`, { headers: { authorization: `Bearer ${keys.A}` } })).json()) as {
      models: Array<{ readiness: string }>;
    };
    ready = health.models[0]?.readiness === 'ready';
  }
  return { url, keys, process: child };
}

/** Lets a call end when told: the flood stops by destroying what is still in flight. */
const inFlight = new Set<http.ClientRequest>();

interface CallResult {
  ttftMs: number;
  tokens: number;
}

/** One streamed chat call; resolves with its time to first content and its completion tokens (0 if cut off). */
function streamedCall(daemon: Daemon, project: string, maxTokens: number, seed: number): Promise<CallResult> {
  const body = JSON.stringify({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'Tell me about Riyadh.' }],
    max_tokens: maxTokens,
    seed,
    stream: true,
    stream_options: { include_usage: true },
  });
  return new Promise((resolve) => {
    const start = performance.now();
    let first = 0;
    let tail = '';
    const req = http.request(`${daemon.url}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${daemon.keys[project]}`, 'content-type': 'application/json' },
    });
    inFlight.add(req);
    const done = (tokens: number) => {
      inFlight.delete(req);
      resolve({ ttftMs: first ? first - start : NaN, tokens });
    };
    req.on('response', (res) => {
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (!first && chunk.includes('"delta":{"content":"')) first = performance.now();
        tail = (tail + chunk).slice(-2048);
      });
      res.on('end', () => done(Number(/"completion_tokens":(\d+)/.exec(tail)?.[1] ?? 0)));
      res.on('error', () => done(0));
    });
    req.on('error', () => done(0));
    req.end(body);
  });
}

/** `concurrency` loops of calls of `maxTokens` for `project`, each replaced as it ends, until stopped; tokens served. */
function keepBusy(daemon: Daemon, project: string, concurrency: number, maxTokens: number) {
  let stopped = false;
  let tokens = 0;
  let seed = 0;
  const loops = Array.from({ length: concurrency }, async () => {
    while (!stopped) tokens += (await streamedCall(daemon, project, maxTokens, ++seed)).tokens;
  });
  return {
    tokens: () => tokens,
    async stop() {
      stopped = true;
      for (const req of inFlight) req.destroy();
      await Promise.all(loops);
    },
  };
}

/** B's short calls one after another: at most `calls`, within the phase's time. */
async function shortCalls(daemon: Daemon): Promise<number[]> {
  const ttfts: number[] = [];
  const end = performance.now() + phaseMs;
  for (let i = 0; i < calls && performance.now() < end; i++) {
    const { ttftMs } = await streamedCall(daemon, 'B', 8, 1000 + i);
    if (Number.isFinite(ttftMs)) ttfts.push(ttftMs);
  }
  return ttfts;
}

const percentile = (xs: number[], p: number) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const jain = (xs: number[]) => {
  const sum = xs.reduce((a, b) => a + b, 0);
  const squares = xs.reduce((a, b) => a + b * b, 0);
  return squares ? (sum * sum) / (xs.length * squares) : NaN;
};

interface PolicyFigures {
  idle: { p50: number; p95: number; calls: number };
  loaded: { p50: number; p95: number; calls: number };
  loadedOverIdleP95: number;
  tokensServed: Record<string, number>;
  jain: number;
}

const figures: Record<string, PolicyFigures> = {};
for (const policy of policies) {
  process.stderr.write(`${policy}: starting a daemon`);
  const daemon = await startDaemon(policy);
  await streamedCall(daemon, 'B', 8, 1); // warm-up
  process.stderr.write(', idle');
  const idle = await shortCalls(daemon);
  process.stderr.write(`, loaded (A keeps ${flood} going)`);
  const a = keepBusy(daemon, 'A', flood, longTokens);
  await new Promise((r) => setTimeout(r, 1000));
  const loaded = await shortCalls(daemon);
  await a.stop();
  process.stderr.write(`, shares (4 projects, ${Math.round(sharesMs / 1000)} s)`);
  const busy = ['A', 'B', 'C', 'D'].map((p) => keepBusy(daemon, p, Math.max(1, Math.floor(flood / 4)), shareTokens));
  await new Promise((r) => setTimeout(r, sharesMs));
  const served = busy.map((b) => b.tokens());
  await Promise.all(busy.map((b) => b.stop()));
  daemon.process.kill('SIGTERM');
  await new Promise((r) => daemon.process.once('exit', r));
  process.stderr.write('\n');
  figures[policy] = {
    idle: { p50: percentile(idle, 50), p95: percentile(idle, 95), calls: idle.length },
    loaded: { p50: percentile(loaded, 50), p95: percentile(loaded, 95), calls: loaded.length },
    loadedOverIdleP95: percentile(loaded, 95) / percentile(idle, 95),
    tokensServed: Object.fromEntries(['A', 'B', 'C', 'D'].map((p, i) => [p, served[i]])),
    jain: jain(served),
  };
}

const ms = (n: number) => (Number.isFinite(n) ? `${n.toFixed(0)} ms` : '—');
console.log(`\nbench:fairness: models.parallel 2, A keeps ${flood} generations of ${longTokens} tokens going; B's calls of 8 tokens`);
console.log('policy   B TTFT idle p50 / p95      B TTFT loaded p50 / p95 (calls)     loaded/idle p95   tokens served A B C D        Jain');
for (const [policy, f] of Object.entries(figures)) {
  console.log(
    `${policy.padEnd(8)} ${`${ms(f.idle.p50)} / ${ms(f.idle.p95)}`.padEnd(26)} ${`${ms(f.loaded.p50)} / ${ms(f.loaded.p95)} (${f.loaded.calls})`.padEnd(35)} ${f.loadedOverIdleP95.toFixed(2).padEnd(17)} ${Object.values(f.tokensServed).join(' ').padEnd(28)} ${f.jain.toFixed(3)}`,
  );
}
const fair = figures.fair;
const goals = fair
  ? { ttftLoadedWithin2xOfIdle: fair.loadedOverIdleP95 <= 2, jainAtLeast095: fair.jain >= 0.95 }
  : { ttftLoadedWithin2xOfIdle: null, jainAtLeast095: null };
if (fair) {
  console.log(`\ngoals (fair):`);
  console.log(
    `  B's TTFT p95 loaded within 2x of idle: ${goals.ttftLoadedWithin2xOfIdle ? 'met' : 'NOT met'} (${fair.loadedOverIdleP95.toFixed(2)}x)`,
  );
  console.log(`  Jain's index over four projects ≥ 0.95: ${goals.jainAtLeast095 ? 'met' : 'NOT met'} (${fair.jain.toFixed(3)})`);
}
appendResult(
  'fairness',
  { flood, long: longTokens, shareTokens, calls, phaseSeconds: phaseMs / 1000, seconds: sharesMs / 1000, policies },
  { ...figures, goals },
);
process.exit(0);
