// Chat throughput and time to first token: the same GGUF model, run directly through node-llama-cpp and through the
// daemon (HTTP, auth, pipeline, SSE), alternating in one run on this machine. Greedy decoding makes both generate
// the same tokens, so they do the same work. Prints tokens/s and TTFT for both and their ratio.
//
//   npm run bench:llama                       a generated random-weight model (about 60 MB)
//   npm run bench:llama -- --model FILE.gguf  an operator's real model
//   options: --rounds N (default 7), --tokens N (default 128)
import { spawn } from 'node:child_process';
import http from 'node:http';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { getLlama, LlamaChat, type ChatHistoryItem } from 'node-llama-cpp';
import { writeTinyGguf } from '../test/fixtures/gguf.js';
import { readGgufFacts } from '../daemon/models/header.js';
import { appendResult } from './results.js';

const { values } = parseArgs({
  options: { model: { type: 'string' }, rounds: { type: 'string' }, tokens: { type: 'string' }, role: { type: 'string' } },
});
const rounds = Number(values.rounds ?? 7);
const maxTokens = Number(values.tokens ?? 128);
const root = resolve(import.meta.dirname, '..');
const work = mkdtempSync(join(tmpdir(), 'sov-bench-'));
const threads = availableParallelism();
const prompt = 'Write a short paragraph about the history of Riyadh. اكتب فقرة قصيرة عن تاريخ الرياض.';

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

interface Run {
  tokens: number;
  /** Whole call, from request to last token. */
  seconds: number;
  /** Request to first generated text. */
  ttftMs: number;
  /** First text to last token: decoding alone. */
  decodeSeconds: number;
}

// --- direct: node-llama-cpp in a child process of its own, as an application would use it ---
if (values.role === 'direct') {
  const llama = await getLlama({ build: 'never', gpu: false });
  const model = await llama.loadModel({ modelPath: values.model! });
  const context = await model.createContext({ contextSize: 2048, sequences: 1, threads });
  const history: ChatHistoryItem[] = [{ type: 'user', text: prompt }];
  const runs: Run[] = [];
  for (let i = 0; i <= rounds; i++) {
    const sequence = context.getSequence();
    const chat = new LlamaChat({ contextSequence: sequence, autoDisposeSequence: false });
    const start = performance.now();
    let first = 0;
    await chat.generateResponse(history, {
      maxTokens,
      temperature: 0,
      onTextChunk: (text) => {
        if (text) first ||= performance.now();
      },
    });
    const end = performance.now();
    // Round 0 warms up, as the daemon's first call does.
    if (i > 0)
      runs.push({
        tokens: sequence.tokenMeter.usedOutputTokens,
        seconds: (end - start) / 1000,
        ttftMs: first - start,
        decodeSeconds: (end - first) / 1000,
      });
    chat.dispose();
    await sequence.dispose();
  }
  process.stdout.write(`${JSON.stringify(runs)}\n`);
  process.exit(0);
}

const modelPath = values.model ? resolve(values.model) : join(work, 'bench-model.gguf');
if (!values.model) {
  process.stderr.write('writing a random-weight benchmark model… ');
  // Seed 1: with these weights greedy decoding does not hit end-of-turn early, so every call generates --tokens.
  writeTinyGguf(modelPath, { embedding: 512, layers: 6, heads: 8, feedForward: 1536, context: 2048, name: 'bench', seed: 1 });
  process.stderr.write('done\n');
}
const size = statSync(modelPath).size;
const sha256 = createHash('sha256').update(readFileSync(modelPath)).digest('hex');

// --- daemon: the same file behind `sovereign serve`, called over HTTP with a streamed request ---
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
const configFile = join(work, 'config.json');
writeFileSync(configFile, JSON.stringify({ models: { parallel: 1 }, log: { level: 'warn' } }));
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
const url = await new Promise<string>((res) => {
  createInterface({ input: daemon.stdout }).on('line', (line) => {
    const event = JSON.parse(line) as { event?: string; url?: string };
    if (event.event === 'listening') res(event.url!);
  });
});
for (let ready = false; !ready; await new Promise((r) => setTimeout(r, 100))) {
  const health = (await (await fetch(`${url}/health`, { headers: { authorization: `Bearer ${secret}` } })).json()) as {
    models: Array<{ readiness: string }>;
  };
  ready = health.models[0]?.readiness === 'ready';
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
function viaDaemon(): Promise<Run> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let first = 0;
    let tail = '';
    const req = http.request(`${url}/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    });
    req.on('response', (res) => {
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (!first && chunk.includes('"delta":{"content":"') && !chunk.includes('"delta":{"role"')) first = performance.now();
        tail = (tail + chunk).slice(-2048);
      });
      res.on('end', () => {
        const end = performance.now();
        const tokens = Number(/"completion_tokens":(\d+)/.exec(tail)?.[1] ?? 0);
        resolve({ tokens, seconds: (end - start) / 1000, ttftMs: first - start, decodeSeconds: (end - first) / 1000 });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const directPhase = () =>
  new Promise<Run[]>((res, rej) => {
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
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => (code === 0 ? res(JSON.parse(out) as Run[]) : rej(new Error(`direct run exited ${code}`))));
  });
const daemonPhase = async () => {
  const runs: Run[] = [];
  for (let i = 0; i < rounds; i++) runs.push(await viaDaemon());
  return runs;
};

// Alternating phases (direct, daemon, direct, daemon), each side alone on the machine while it runs.
await viaDaemon(); // the daemon's warm-up; the direct side warms up inside its phase
const d: Run[] = [];
const s: Run[] = [];
for (let phase = 0; phase < 2; phase++) {
  d.push(...(await directPhase()));
  s.push(...(await daemonPhase()));
}
daemon.kill('SIGTERM');
rmSync(work, { recursive: true, force: true });

// Decode throughput: tokens after the first, over the time after the first. End to end: all tokens, whole call.
const decode = (xs: Run[]) => median(xs.map((x) => (x.tokens - 1) / x.decodeSeconds));
const endToEnd = (xs: Run[]) => median(xs.map((x) => x.tokens / x.seconds));
const ttft = (xs: Run[]) => median(xs.map((x) => x.ttftMs));
const directRate = decode(d);
const daemonRate = decode(s);
console.log(
  `model ${values.model ?? 'generated random-weight GGUF'} (${(size / 1024 ** 2).toFixed(1)} MiB), ${threads} threads, ${maxTokens} tokens, 2 × ${rounds} calls each side (medians)`,
);
console.log(`tokens generated per call: direct ${d.map((x) => x.tokens).join(',')}; daemon ${s.map((x) => x.tokens).join(',')}`);
console.log(
  `throughput   direct ${directRate.toFixed(1)} tok/s   daemon ${daemonRate.toFixed(1)} tok/s   ratio ${(daemonRate / directRate).toFixed(3)} (goal ≥ 0.97)`,
);
console.log(
  `end to end   direct ${endToEnd(d).toFixed(1)} tok/s   daemon ${endToEnd(s).toFixed(1)} tok/s   ratio ${(endToEnd(s) / endToEnd(d)).toFixed(3)}`,
);
console.log(
  `first token  direct ${ttft(d).toFixed(1)} ms   daemon ${ttft(s).toFixed(1)} ms   overhead ${(ttft(s) - ttft(d)).toFixed(1)} ms (goal < 2 ms)`,
);
appendResult(
  'llama',
  { model: values.model ?? null, rounds, tokens: maxTokens },
  {
    modelMiB: size / 1024 ** 2,
    threads,
    tokensPerCall: { direct: d.map((x) => x.tokens), daemon: s.map((x) => x.tokens) },
    decodeTokensPerSecond: { direct: directRate, daemon: daemonRate, ratio: daemonRate / directRate },
    endToEndTokensPerSecond: { direct: endToEnd(d), daemon: endToEnd(s), ratio: endToEnd(s) / endToEnd(d) },
    firstTokenMs: { direct: ttft(d), daemon: ttft(s), overhead: ttft(s) - ttft(d) },
    goals: { throughputAtLeast097OfDirect: daemonRate / directRate >= 0.97, firstTokenOverheadUnder2ms: ttft(s) - ttft(d) < 2 },
  },
);
process.exit(0);
