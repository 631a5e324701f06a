// Chat throughput and time to first token: the same GGUF model, run directly through node-llama-cpp and through the
// daemon (HTTP, auth, pipeline, SSE), alternating in one run on this machine, with 1, 4 and 8 streams at once. Greedy
// decoding makes both generate the same tokens, so they do the same work. Directly, the streams are sequences of one
// context, as the daemon's calls are (its models.parallel set to the number of streams), on as many threads as the
// daemon's default (every core) and with the weights read into memory as the daemon reads them (it does not map
// the file: docs/models.md). Prints aggregate tokens/s, TTFT and CPU time per token for both and their ratio at each
// number of streams.
//
//   npm run bench:llama                       a generated random-weight model (about 80 MB)
//   npm run bench:llama -- --model FILE.gguf  an operator's real model
//   options: --rounds N (default 7), --tokens N (default 128), --streams 1,4,8 (the numbers of streams at once),
//            --threads N (both sides; default the daemon's), --direct-mmap (the direct side maps the file, as
//            node-llama-cpp does by default: what reading the weights into memory costs)
import { execFileSync, spawn } from 'node:child_process';
import http from 'node:http';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { getLlama, LlamaChat, resolveChatWrapper, type ChatHistoryItem } from 'node-llama-cpp';
import { writeTinyGguf } from '../test/fixtures/gguf.js';
import { inferenceThreads } from '../daemon/hardware/index.js';
import { readGgufFacts } from '../daemon/models/header.js';
import { appendResult } from './results.js';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    rounds: { type: 'string' },
    tokens: { type: 'string' },
    streams: { type: 'string' },
    role: { type: 'string' },
    threads: { type: 'string' },
    'direct-mmap': { type: 'boolean' },
  },
});
const rounds = Number(values.rounds ?? 7);
const maxTokens = Number(values.tokens ?? 128);
const streamCounts = (values.streams ?? '1,4,8').split(',').map(Number);
if (!streamCounts.every((n) => Number.isInteger(n) && n >= 1 && n <= 64))
  throw new Error('--streams takes numbers from 1 to 64, comma-separated');
const root = resolve(import.meta.dirname, '..');
const work = mkdtempSync(join(tmpdir(), 'sov-bench-'));
const requestedThreads = Number(values.threads ?? 0);
if (!(Number.isInteger(requestedThreads) && requestedThreads >= 0))
  throw new Error('--threads takes a positive integer (0: the daemon’s default)');
const threads = inferenceThreads(requestedThreads);
const directMmap = values['direct-mmap'] ?? false;
const prompt = 'Write a short paragraph about the history of Riyadh. اكتب فقرة قصيرة عن تاريخ الرياض.';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/**
 * One stream of a round: its tokens; when it was asked for, gave its first text and ended (performance.now()); and
 * its text as it came: [time, characters so far].
 */
interface Run {
  tokens: number;
  start: number;
  first: number;
  end: number;
  progress: Array<[number, number]>;
}

/** A phase's rounds and the CPU time it took: the process's all threads (llama.cpp's among them), in ms. */
interface Phase {
  rounds: Run[][];
  cpuMs: number;
}

/** The share of a stream's text that came after `from` and by `to`. */
function shareBetween(run: Run, from: number, to: number): number {
  const total = run.progress.at(-1)?.[1] ?? 0;
  if (!total) return 0;
  let before = 0;
  let by = 0;
  for (const [time, chars] of run.progress) {
    if (time <= from) before = chars;
    if (time <= to) by = chars;
  }
  return (by - before) / total;
}

/**
 * A round's aggregate decode throughput: the tokens generated while every stream of the round was generating (from
 * the last first text to the first end), over that time; each stream's tokens in it counted by the share of its text
 * that came then. Starts that straggle are the first token's cost, not the decoding's. With one stream, its rate after
 * its first text.
 */
function decodeRate(round: Run[]): number {
  const from = Math.max(...round.map((r) => r.first));
  const to = Math.min(...round.map((r) => r.end));
  if (to <= from) return NaN;
  return round.reduce((n, r) => n + r.tokens * shareBetween(r, from, to), 0) / ((to - from) / 1000);
}
/** All tokens of a round over the time from the first request to the last end. */
const endToEndRate = (round: Run[]) =>
  round.reduce((n, r) => n + r.tokens, 0) / ((Math.max(...round.map((r) => r.end)) - Math.min(...round.map((r) => r.start))) / 1000);

// --- direct: node-llama-cpp in a child process of its own, as an application would use it: one context with a
// sequence per stream, the chat wrapper resolved once, the daemon's threads and its way of loading the weights ---
if (values.role === 'direct') {
  const streams = streamCounts[0];
  const llama = await getLlama({ build: 'never', gpu: false, maxThreads: threads });
  const model = await llama.loadModel({ modelPath: values.model!, useMmap: directMmap });
  const context = await model.createContext({ contextSize: 2048, sequences: streams, threads });
  const chatWrapper = resolveChatWrapper(model);
  const history: ChatHistoryItem[] = [{ type: 'user', text: prompt }];
  const stream = async (): Promise<Run> => {
    const sequence = context.getSequence();
    const chat = new LlamaChat({ contextSequence: sequence, chatWrapper, autoDisposeSequence: false });
    const start = performance.now();
    let first = 0;
    let chars = 0;
    const progress: Run['progress'] = [];
    await chat.generateResponse(history, {
      maxTokens,
      temperature: 0,
      onTextChunk: (text) => {
        if (!text) return;
        const now = performance.now();
        first ||= now;
        progress.push([now, (chars += text.length)]);
      },
    });
    const end = performance.now();
    chat.dispose();
    await sequence.dispose();
    return { tokens: sequence.tokenMeter.usedOutputTokens, start, first, end, progress };
  };
  const out: Run[][] = [];
  let cpu = process.cpuUsage();
  for (let i = 0; i <= rounds; i++) {
    // Round 0 warms up, as the daemon's first calls do.
    if (i === 1) cpu = process.cpuUsage();
    const round = await Promise.all(Array.from({ length: streams }, stream));
    if (i > 0) out.push(round);
  }
  const used = process.cpuUsage(cpu);
  const phase: Phase = { rounds: out, cpuMs: (used.user + used.system) / 1000 };
  process.stdout.write(`${JSON.stringify(phase)}\n`);
  process.exit(0);
}

const modelPath = values.model ? resolve(values.model) : join(work, 'bench-model.gguf');
if (!values.model) {
  process.stderr.write('writing a random-weight benchmark model… ');
  // Every call generates --tokens: the end tokens' output rows are zero (neverEnds). Streams batched together get
  // slightly different logits than a stream alone, which on random weights made some pick an end token early, and then
  // the two sides did not do the same work.
  writeTinyGguf(modelPath, {
    embedding: 512,
    layers: 6,
    heads: 8,
    feedForward: 1536,
    context: 2048,
    name: 'bench',
    seed: 1,
    neverEnds: true,
  });
  process.stderr.write('done\n');
}
const size = statSync(modelPath).size;
const sha256 = createHash('sha256').update(readFileSync(modelPath)).digest('hex');

// --- daemon: the same file behind `sovereign serve`, called over HTTP with streamed requests ---
const dataDir = join(work, 'data');
const manifest = join(work, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({
    models: [
      {
        id: 'bench',
        file: basename(modelPath),
        sha256,
        size,
        capability: 'chat',
        engine: 'llama.cpp',
        languages: ['ar', 'en'],
        context: 2048,
        servingContext: 2048,
        needs: { ramBytes: 0, vramBytes: 0, gpuRequired: false },
        ownedBy: 'bench',
        // The benchmark's own file: the header check has nothing to catch here, so its facts are the file's.
        gguf: await readGgufFacts(modelPath),
      },
    ],
  }),
);
const bin = join(root, 'bin', 'sovereign');
const run = (args: string[]) =>
  new Promise<string>((res, rej) => {
    const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', (code) => (code === 0 ? res(out) : rej(new Error(`${args.join(' ')} exited ${code}`))));
  });
await run(['projects', 'create', 'bench', '--data-dir', dataDir]);
const secret = (JSON.parse(await run(['keys', 'create', '--project', 'bench', '--data-dir', dataDir, '--json'])) as { secret: string })
  .secret;

/** A daemon serving the model with `parallel` sequences on the bench's threads; its URL. */
async function startDaemon(parallel: number): Promise<{ url: string; cpuMs: () => number; stop: () => Promise<void> }> {
  const configFile = join(work, `config-${parallel}.json`);
  writeFileSync(configFile, JSON.stringify({ models: { parallel, threads }, log: { level: 'warn' } }));
  const daemon = spawn(
    bin,
    [
      'serve',
      '--config',
      configFile,
      '--port',
      '0',
      '--data-dir',
      dataDir,
      '--models-dir',
      dirname(modelPath),
      '--manifest',
      manifest,
      '--json',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const exited = new Promise<void>((res) => daemon.once('exit', () => res()));
  const url = await new Promise<string>((res) => {
    createInterface({ input: daemon.stdout }).on('line', (line) => {
      const event = JSON.parse(line) as { event?: string; url?: string };
      if (event.event === 'listening') res(event.url!);
    });
  });
  for (let ready = false, tries = 0; !ready; await new Promise((r) => setTimeout(r, 100))) {
    if (++tries > 600) throw new Error('the daemon did not load the model within a minute');
    const health = (await (await fetch(`${url}/health`, { headers: { authorization: `Bearer ${secret}` } })).json()) as {
      models: Array<{ readiness: string }>;
    };
    ready = health.models[0]?.readiness === 'ready';
  }
  return {
    url,
    cpuMs: () => processCpuMs(daemon.pid!),
    stop: async () => {
      daemon.kill('SIGTERM');
      await exited;
    },
  };
}

const clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
/** CPU time a process has used, all its threads, in ms (/proc/PID/stat: utime and stime). */
function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks;
}

// node:http and a scan for the first content delta only: the client shares the machine's cores with the daemon,
// so it must cost as little as possible.
const body = JSON.stringify({
  model: 'bench',
  messages: [{ role: 'user', content: prompt }],
  max_tokens: maxTokens,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
function viaDaemon(url: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let first = 0;
    let chars = 0;
    const progress: Run['progress'] = [];
    let tail = '';
    const req = http.request(`${url}/chat/completions`, {
      method: 'POST',
      agent,
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    });
    req.on('response', (res) => {
      if (res.statusCode !== 200) reject(new Error(`the daemon answered ${res.statusCode}`));
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        const now = performance.now();
        if (!first && chunk.includes('"delta":{"content":"') && !chunk.includes('"delta":{"role"')) first = now;
        // The content's length as sent (JSON-escaped): only its shares within the stream are used.
        let text = 0;
        for (let at = chunk.indexOf('"content":"'); at >= 0; at = chunk.indexOf('"content":"', at + 11)) {
          const close = chunk.indexOf('"}', at + 11);
          if (close > at) text += close - at - 11;
        }
        if (text) progress.push([now, (chars += text)]);
        tail = (tail + chunk).slice(-2048);
      });
      res.on('end', () => {
        const end = performance.now();
        const tokens = Number(/"completion_tokens":(\d+)/.exec(tail)?.[1] ?? 0);
        resolve({ tokens, start, first, end, progress });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const directPhase = (streams: number) =>
  new Promise<Phase>((res, rej) => {
    const child = spawn(
      process.execPath,
      [
        ...process.execArgv,
        process.argv[1],
        '--role',
        'direct',
        '--model',
        modelPath,
        '--rounds',
        String(rounds),
        '--tokens',
        String(maxTokens),
        '--streams',
        String(streams),
        '--threads',
        String(threads),
        ...(directMmap ? ['--direct-mmap'] : []),
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => (code === 0 ? res(JSON.parse(out) as Phase) : rej(new Error(`direct run exited ${code}`))));
  });
/** The daemon's phase; its CPU time is the daemon's and this client's (which the direct side has no need of). */
const daemonPhase = async (daemon: { url: string; cpuMs: () => number }, streams: number): Promise<Phase & { clientCpuMs: number }> => {
  const out: Run[][] = [];
  const before = daemon.cpuMs();
  const client = process.cpuUsage();
  for (let i = 0; i < rounds; i++) out.push(await Promise.all(Array.from({ length: streams }, () => viaDaemon(daemon.url))));
  const used = process.cpuUsage(client);
  return { rounds: out, cpuMs: daemon.cpuMs() - before, clientCpuMs: (used.user + used.system) / 1000 };
};

interface Side {
  rounds: Run[][];
  decode: number;
  endToEnd: number;
  ttftMs: number;
  /** CPU time per generated token: the generating process's, and the bench client's (the daemon's side only). */
  cpuMsPerToken: number;
  clientCpuMsPerToken: number;
}
const side = (phases: Array<Phase & { clientCpuMs?: number }>): Side => {
  const rs = phases.flatMap((p) => p.rounds);
  const generated = rs.flat().reduce((n, r) => n + r.tokens, 0);
  return {
    rounds: rs,
    decode: median(rs.map(decodeRate)),
    endToEnd: median(rs.map(endToEndRate)),
    ttftMs: median(rs.flat().map((r) => r.first - r.start)),
    cpuMsPerToken: phases.reduce((n, p) => n + p.cpuMs, 0) / generated,
    clientCpuMsPerToken: phases.reduce((n, p) => n + (p.clientCpuMs ?? 0), 0) / generated,
  };
};
interface Level {
  streams: number;
  direct: Side;
  daemon: Side;
  ratio: number;
}
const levels: Level[] = [];
try {
  for (const streams of streamCounts) {
    const daemon = await startDaemon(streams);
    try {
      // The daemon's warm-up; the direct side warms up inside its phase.
      await Promise.all(Array.from({ length: streams }, () => viaDaemon(daemon.url)));
      // Alternating phases (direct, daemon, direct, daemon), each side alone on the machine while it runs.
      const d: Phase[] = [];
      const s: Array<Phase & { clientCpuMs: number }> = [];
      for (let phase = 0; phase < 2; phase++) {
        d.push(await directPhase(streams));
        s.push(await daemonPhase(daemon, streams));
      }
      const direct = side(d);
      const viaTheDaemon = side(s);
      levels.push({ streams, direct, daemon: viaTheDaemon, ratio: viaTheDaemon.decode / direct.decode });
      process.stderr.write(
        `${streams} stream(s): direct ${direct.decode.toFixed(1)} tok/s, daemon ${viaTheDaemon.decode.toFixed(1)} tok/s, ratio ${(viaTheDaemon.decode / direct.decode).toFixed(3)}\n`,
      );
    } finally {
      await daemon.stop();
    }
  }
} finally {
  agent.destroy();
  rmSync(work, { recursive: true, force: true });
}

/** The goal at each number of streams: one stream as before, several at 0.95. */
const goalOf = (streams: number) => (streams === 1 ? 0.97 : 0.95);
console.log(
  `model ${values.model ?? 'generated random-weight GGUF'} (${(size / 1024 ** 2).toFixed(1)} MiB), ${threads} threads, ${maxTokens} tokens per stream, 2 × ${rounds} rounds each side (medians); ` +
    `the direct side ${directMmap ? 'maps the file (node-llama-cpp’s default)' : 'reads the weights into memory, as the daemon does'}`,
);
console.log('');
console.log(
  'streams   decode tok/s direct   daemon    ratio  goal        end to end direct   daemon    ratio   first token direct   daemon',
);
for (const { streams, direct, daemon, ratio } of levels) {
  const goal = goalOf(streams);
  console.log(
    `${String(streams).padStart(7)}   ${direct.decode.toFixed(1).padStart(18)}   ${daemon.decode.toFixed(1).padStart(6)}   ${ratio.toFixed(3)}  ≥ ${goal} ${ratio >= goal ? 'met' : 'NOT met'}   ` +
      `${direct.endToEnd.toFixed(1).padStart(17)}   ${daemon.endToEnd.toFixed(1).padStart(6)}   ${(daemon.endToEnd / direct.endToEnd).toFixed(3)}   ` +
      `${direct.ttftMs.toFixed(1).padStart(15)} ms   ${daemon.ttftMs.toFixed(1)} ms`,
  );
}
const tokens = (rs: Run[][]) => [...new Set(rs.flat().map((r) => r.tokens))].join(',');
console.log('');
console.log('CPU ms per token   direct (its process)   daemon (its process + the bench client)');
for (const { streams, direct, daemon } of levels) {
  console.log(
    `${String(streams).padStart(7)} streams   ${direct.cpuMsPerToken.toFixed(2).padStart(20)}   ${(daemon.cpuMsPerToken + daemon.clientCpuMsPerToken).toFixed(2)} (${daemon.cpuMsPerToken.toFixed(2)} + ${daemon.clientCpuMsPerToken.toFixed(2)})`,
  );
}
console.log('');
console.log(
  `tokens per stream: ${levels.map((l) => `${l.streams} streams: direct ${tokens(l.direct.rounds)}, daemon ${tokens(l.daemon.rounds)}`).join('; ')}`,
);
const single = levels.find((l) => l.streams === 1);
if (single) {
  const overhead = single.daemon.ttftMs - single.direct.ttftMs;
  console.log(
    `first token, 1 stream: direct ${single.direct.ttftMs.toFixed(1)} ms, daemon ${single.daemon.ttftMs.toFixed(1)} ms, overhead ${overhead.toFixed(1)} ms (goal < 2 ms: ${overhead < 2 ? 'met' : 'NOT met'})`,
  );
}
appendResult(
  'llama',
  { model: values.model ?? null, rounds, tokens: maxTokens, streams: streamCounts, threads, directMmap },
  {
    modelMiB: size / 1024 ** 2,
    threads,
    levels: levels.map(({ streams, direct, daemon, ratio }) => ({
      streams,
      decodeTokensPerSecond: { direct: direct.decode, daemon: daemon.decode, ratio },
      endToEndTokensPerSecond: { direct: direct.endToEnd, daemon: daemon.endToEnd, ratio: daemon.endToEnd / direct.endToEnd },
      firstTokenMs: { direct: direct.ttftMs, daemon: daemon.ttftMs },
      cpuMsPerToken: { direct: direct.cpuMsPerToken, daemon: daemon.cpuMsPerToken, client: daemon.clientCpuMsPerToken },
      tokensPerStream: { direct: tokens(direct.rounds), daemon: tokens(daemon.rounds) },
    })),
    goals: {
      ...Object.fromEntries(
        levels.map((l) => [`decode${l.streams}StreamsAtLeast${goalOf(l.streams)}OfDirect`, l.ratio >= goalOf(l.streams)]),
      ),
      ...(single ? { firstTokenOverheadUnder2ms: single.daemon.ttftMs - single.direct.ttftMs < 2 } : {}),
    },
  },
);
process.exit(0);
