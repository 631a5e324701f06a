// Speech-to-text speed: the same whisper model and the same audio, transcribed by @fugood/whisper.node called
// directly (in a child process of its own) and through the daemon (`sovereign serve`: HTTP upload, multipart, auth,
// ffmpeg decoding, the engine adapter, scrubbing of the transcript), alternating round by round in one run.
//
// Both sides do the same work per call: ffmpeg decodes the file with the daemon's own command line (16 kHz mono
// s16le; the daemon decodes every upload, so the direct side decodes on every call too), then one transcribeData
// per 30 s window with the daemon's options (language en, temperature 0, temperatureInc 0, maxThreads = threads).
//
// Real-time factor here = seconds of audio / wall seconds of the call (how many times faster than real time; higher
// is faster). The ratio is daemon RTF / direct RTF (1.0 = as fast as direct).
//
//   npm run bench:speech                          the generated tiny whisper model, ~60 s of espeak-ng English
//   npm run bench:speech -- --model FILE.bin      an operator's real ggml whisper model
//   npm run bench:speech -- --audio FILE          an operator's audio (any container ffmpeg reads)
//   options: --rounds N (default 5 per side, after one warm-up each), --threads N (default: every core),
//            --seconds N (time budget for the measured rounds, default 900; rounds past it are skipped)
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { PcmWindows } from '../daemon/speech/decode.js';
import { speech } from '../test/fixtures/audio.js';
import { writeTinyWhisperModel } from '../test/fixtures/whisper.js';
import { readGgmlFacts } from '../daemon/models/header.js';
import { appendResult } from './results.js';

const { values } = parseArgs({
  options: {
    model: { type: 'string' },
    audio: { type: 'string' },
    rounds: { type: 'string' },
    threads: { type: 'string' },
    seconds: { type: 'string' },
    role: { type: 'string' },
  },
});
const rounds = Number(values.rounds ?? 5);
const threads = Number(values.threads ?? availableParallelism());
const budgetMs = Number(values.seconds ?? 900) * 1000;
/** One call (either side) may take at most this long before the benchmark gives up. */
const CALL_TIMEOUT_MS = 10 * 60_000;
const SAMPLE_RATE = 16_000;
const WINDOW_BYTES = 30 * SAMPLE_RATE * 2;
/** The daemon's default speech.maxSeconds; its ffmpeg command stops one second past it. */
const MAX_SECONDS = 2 * 3600;
const root = resolve(import.meta.dirname, '..');

/** User + system CPU seconds of process `pid` and of its children it has waited for (ffmpeg), from /proc. */
function cpuSeconds(pid: number | undefined): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / 100; // USER_HZ is 100 on Linux
  } catch {
    return NaN;
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** The daemon's ffmpeg command (daemon/speech/decode.ts), reading `input`, writing 16 kHz mono s16le to stdout. */
function ffmpegArgs(input: string): string[] {
  return [
    '-nostdin',
    '-hide_banner',
    '-loglevel',
    'error',
    '-i',
    input,
    '-vn',
    '-sn',
    '-dn',
    '-ac',
    '1',
    '-ar',
    String(SAMPLE_RATE),
  ].concat(['-t', String(MAX_SECONDS + 1), '-f', 's16le', 'pipe:1']);
}

/** Decodes `input` with ffmpeg, yielding 30 s windows as the PCM arrives (the last one shorter), as the daemon does. */
async function* windows(input: string): AsyncGenerator<ArrayBuffer> {
  const ffmpeg = spawn('ffmpeg', ffmpegArgs(input), { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<number | null>((res) => ffmpeg.on('close', res));
  const pcm = new PcmWindows(WINDOW_BYTES);
  for await (const chunk of ffmpeg.stdout as AsyncIterable<Buffer>) yield* pcm.push(chunk);
  const code = await exited;
  if (code !== 0) throw new Error(`ffmpeg exited ${code} on ${input}`);
  const last = pcm.rest();
  if (last) yield last;
}

interface Round {
  /** Wall time of the whole call. */
  seconds: number;
  /** CPU time of the side's process and the ffmpeg it ran, user + system, during the call (Linux; else NaN). */
  cpu?: number;
  /** The transcript, to check both sides did the same work. */
  text: string;
}

// --- direct: the binding in a child process of its own, driven one round at a time over stdin ---
if (values.role === 'direct') {
  const { default: whisper } = await import('@fugood/whisper.node');
  const context = await whisper.initWhisper({ filePath: values.model!, useGpu: false });
  const audio = values.audio!;
  const lines = createInterface({ input: process.stdin });
  process.stdout.write('ready\n');
  for await (const line of lines) {
    if (line !== 'run') break;
    const start = performance.now();
    const texts: string[] = [];
    for await (const window of windows(audio)) {
      const { promise } = context.transcribeData(window, { language: 'en', temperature: 0, temperatureInc: 0, maxThreads: threads });
      const result = await promise;
      for (const s of result.segments) if (s.text.trim()) texts.push(s.text.trim());
    }
    const round: Round = { seconds: (performance.now() - start) / 1000, text: texts.join(' ') };
    process.stdout.write(`${JSON.stringify(round)}\n`);
  }
  await context.release();
  process.exit(0);
}

const work = mkdtempSync(join(tmpdir(), 'sov-bench-speech-'));
// On any failure too: no files left behind.
process.on('exit', () => rmSync(work, { recursive: true, force: true }));
const modelsDir = values.model ? dirname(resolve(values.model)) : join(work, 'models');
mkdirSync(modelsDir, { recursive: true });
const modelPath = values.model ? resolve(values.model) : join(modelsDir, 'bench-whisper.bin');
if (!values.model) writeTinyWhisperModel(modelPath);
const size = statSync(modelPath).size;
const sha256 = createHash('sha256').update(readFileSync(modelPath)).digest('hex');

/** Seconds of 16 kHz audio in `file`, decoded by the same ffmpeg command. */
async function audioSeconds(file: string): Promise<number> {
  let bytes = 0;
  for await (const w of windows(file)) bytes += w.byteLength;
  return bytes / 2 / SAMPLE_RATE;
}

// About a minute of English speech from espeak-ng: two 30 s windows.
let audioPath: string;
if (values.audio) audioPath = resolve(values.audio);
else {
  const sentences = [
    'The branch opens at eight in the morning and closes at four in the afternoon, from Sunday to Thursday.',
    'Customers who need to update their national address should bring their identity card and a recent utility bill.',
    'Transfers to other banks are processed on the same working day when they are submitted before two o’clock.',
    'The new mobile application lets you pay bills, check your balance and order a replacement card in a few steps.',
    'If your card is lost or stolen, call the support line immediately so that it can be blocked at once.',
  ];
  const say = (count: number) => speech(work, Array.from({ length: count }, (_, i) => sentences[i % sentences.length]).join(' '), 'en');
  // Aim for 50-60 s (two windows, the second nearly full): scale the sentence count to the length espeak-ng's voice
  // gives the text on this machine, a few tries at most.
  let count = 10;
  audioPath = say(count);
  for (let attempt = 0, seconds = await audioSeconds(audioPath); (seconds < 50 || seconds > 60) && attempt < 4; attempt++) {
    count = Math.max(1, Math.round((count * 55) / seconds));
    audioPath = say(count);
    seconds = await audioSeconds(audioPath);
  }
}
const audioBytes = readFileSync(audioPath);
const duration = await audioSeconds(audioPath);

// --- daemon: the same model behind `sovereign serve`, one transcription per round over loopback ---
const dataDir = join(work, 'data');
const manifest = join(work, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({
    models: [
      {
        id: 'bench-whisper',
        file: basename(modelPath),
        sha256,
        size,
        capability: 'transcription',
        engine: 'whisper.cpp',
        languages: ['ar', 'en'],
        context: 448,
        needs: { ramBytes: 0, vramBytes: 0, gpuRequired: false },
        ownedBy: 'bench',
        // The benchmark's own file: the header check has nothing to catch here, so its facts are the file's.
        ggml: await readGgmlFacts(modelPath),
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
writeFileSync(
  configFile,
  JSON.stringify({
    models: { threads, queue: 1, gpu: 'off' },
    speech: { maxUploadBytes: Math.max(25 * 1024 * 1024, audioBytes.length + 1024 * 1024) },
    log: { level: 'warn' },
  }),
);
const daemon = spawn(
  bin,
  ['serve', '--config', configFile, '--port', '0', '--data-dir', dataDir, '--models-dir', modelsDir, '--manifest', manifest, '--json'],
  { stdio: ['ignore', 'pipe', 'pipe'] },
);
// On any failure too: no daemon left running.
process.on('exit', () => daemon.kill('SIGTERM'));
// whisper.cpp logs model loading to stderr in both processes: keep the end, shown only if a side fails.
let daemonLog = '';
daemon.stderr.on('data', (d: Buffer) => (daemonLog = (daemonLog + d.toString()).slice(-4096)));
daemon.on('exit', (code, signal) => {
  if (code || (signal && signal !== 'SIGTERM')) process.stderr.write(`the daemon exited ${code ?? signal}:\n${daemonLog}\n`);
});
const url = await new Promise<string>((res, rej) => {
  const timer = setTimeout(() => rej(new Error('the daemon did not start listening within 60 s')), 60_000);
  createInterface({ input: daemon.stdout }).on('line', (line) => {
    const event = JSON.parse(line) as { event?: string; url?: string };
    if (event.event === 'listening') {
      clearTimeout(timer);
      res(event.url!);
    }
  });
});
if (!/^http:\/\/(127\.0\.0\.1|localhost|\[::1\])[:/]/.test(url)) throw new Error(`the daemon listens on ${url}, not loopback`);
for (let ready = false, waited = 0; !ready; waited += 100, await new Promise((r) => setTimeout(r, 100))) {
  if (waited > 120_000) throw new Error('the whisper model was not ready within 120 s');
  const health = (await (await fetch(`${url}/health`, { headers: { authorization: `Bearer ${secret}` } })).json()) as {
    models: Array<{ id: string; readiness: string }>;
  };
  ready = health.models.find((m) => m.id === 'bench-whisper')?.readiness === 'ready';
}

async function viaDaemon(): Promise<Round> {
  const form = new FormData();
  form.append('model', 'bench-whisper');
  form.append('language', 'en');
  form.append('response_format', 'json');
  form.append('file', new Blob([audioBytes], { type: 'audio/wav' }), basename(audioPath));
  const start = performance.now();
  const res = await fetch(`${url}/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}` },
    body: form,
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
  const body = (await res.json()) as { text?: string };
  const seconds = (performance.now() - start) / 1000;
  if (res.status !== 200) throw new Error(`the daemon answered ${res.status}: ${JSON.stringify(body)}\n${daemonLog}`);
  return { seconds, text: body.text ?? '' };
}

// The direct side: one child for the whole run (the model is loaded once, as in the daemon), one round per request.
const direct = spawn(
  process.execPath,
  [...process.execArgv, process.argv[1], '--role', 'direct', '--model', modelPath, '--audio', audioPath, '--threads', String(threads)],
  { stdio: ['pipe', 'pipe', 'pipe'] },
);
let directLog = '';
direct.stderr.on('data', (d: Buffer) => (directLog = (directLog + d.toString()).slice(-4096)));
direct.on('exit', (code) => {
  if (code) process.stderr.write(`the direct side exited ${code}:\n${directLog}\n`);
});
process.on('exit', () => direct.kill());
const replies = createInterface({ input: direct.stdout })[Symbol.asyncIterator]();
async function nextReply(): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, rej) => {
    timer = setTimeout(() => rej(new Error(`the direct side did not answer within ${CALL_TIMEOUT_MS} ms`)), CALL_TIMEOUT_MS);
  });
  try {
    const next = await Promise.race([replies.next(), timeout]);
    if (next.done) throw new Error('the direct side exited');
    return next.value;
  } finally {
    clearTimeout(timer);
  }
}
if ((await nextReply()) !== 'ready') throw new Error('the direct side did not start');
async function viaDirect(): Promise<Round> {
  direct.stdin.write('run\n');
  return JSON.parse(await nextReply()) as Round;
}

// Warm-ups (one each, not counted), then alternating rounds: direct, daemon, direct, daemon… each side alone on the
// machine while it runs. Bounded by --rounds and the --seconds budget.
const warm = [await viaDirect(), await viaDaemon()];
const d: Round[] = [];
const s: Round[] = [];
/** The daemon's CPU while the direct side runs: its background work, which competes with the direct side. */
let daemonIdleCpu = 0;
let directSeconds = 0;
const measured = async (pid: number | undefined, call: () => Promise<Round>): Promise<Round> => {
  const before = cpuSeconds(pid);
  const round = await call();
  return { ...round, cpu: cpuSeconds(pid) - before };
};
const started = performance.now();
for (let i = 0; i < rounds && performance.now() - started < budgetMs; i++) {
  const idle = cpuSeconds(daemon.pid);
  const r = await measured(direct.pid, viaDirect);
  daemonIdleCpu += cpuSeconds(daemon.pid) - idle;
  directSeconds += r.seconds;
  d.push(r);
  s.push(await measured(daemon.pid, viaDaemon));
}
direct.stdin.end('exit\n');
daemon.kill('SIGTERM');
await Promise.all([new Promise((r) => direct.on('exit', r)), new Promise((r) => daemon.on('exit', r))]);
rmSync(work, { recursive: true, force: true });

const same = [...warm, ...d, ...s].every((r) => r.text === warm[0].text);
const wall = (xs: Round[]) => median(xs.map((x) => x.seconds));
const rtf = (xs: Round[]) => duration / wall(xs);
const ratio = rtf(s) / rtf(d);
console.log(
  `model ${values.model ?? 'generated tiny whisper'} (${(size / 1024 ** 2).toFixed(1)} MiB), audio ${values.audio ?? 'espeak-ng English'} ` +
    `(${duration.toFixed(1)} s, ${Math.ceil(duration / 30)} windows), ${threads} threads, ${d.length} rounds each side after one warm-up (medians)`,
);
console.log(`same transcript on every call, both sides: ${same ? 'yes' : 'NO'} (${warm[0].text.split(' ').length} words)`);
const quartiles = (xs: Round[]) => {
  const w = xs.map((x) => x.seconds).sort((a, b) => a - b);
  return `${w[Math.floor((w.length - 1) / 4)].toFixed(3)}-${w[Math.ceil(((w.length - 1) * 3) / 4)].toFixed(3)}`;
};
console.log(`direct rounds (s): ${d.map((x) => x.seconds.toFixed(3)).join(' ')}   (quartiles ${quartiles(d)})`);
console.log(`daemon rounds (s): ${s.map((x) => x.seconds.toFixed(3)).join(' ')}   (quartiles ${quartiles(s)})`);
console.log(
  `wall time        direct ${wall(d).toFixed(3)} s   daemon ${wall(s).toFixed(3)} s   difference ${(wall(s) - wall(d)).toFixed(3)} s`,
);
const cpu = (xs: Round[]) => median(xs.map((x) => x.cpu ?? NaN));
console.log(
  `CPU per call     direct ${cpu(d).toFixed(3)} s   daemon ${cpu(s).toFixed(3)} s   (process + its ffmpeg, user + system; ` +
    `daemon while idle: ${((daemonIdleCpu / directSeconds) * 1000).toFixed(1)} ms/s)`,
);
console.log(
  `real-time factor direct ${rtf(d).toFixed(1)}x   daemon ${rtf(s).toFixed(1)}x   ratio ${ratio.toFixed(3)} (goal ≥ 0.95: ${ratio >= 0.95 ? 'met' : 'NOT met'})`,
);
appendResult(
  'speech',
  { model: values.model ?? null, audio: values.audio ?? null, rounds, threads, seconds: budgetMs / 1000 },
  {
    modelMiB: size / 1024 ** 2,
    audioSeconds: duration,
    roundsEachSide: d.length,
    sameTranscript: same,
    wallSeconds: { direct: wall(d), daemon: wall(s) },
    cpuSecondsPerCall: { direct: cpu(d), daemon: cpu(s), daemonIdleMsPerSecond: (daemonIdleCpu / directSeconds) * 1000 },
    realTimeFactor: { direct: rtf(d), daemon: rtf(s), ratio },
    goals: { realTimeFactorAtLeast095OfDirect: ratio >= 0.95 },
  },
);
process.exit(0);
