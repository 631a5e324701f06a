// bench:instructions: what a call costs the daemon in machine instructions, counted by valgrind's callgrind, against
// the bare proxy (bench:gateway's `bare`: the daemon's stack with none of its pipeline) in the same run. Time on this
// shared machine drifts by a third from one minute to the next, so a change of a few percent cannot be seen in rates;
// instructions are counted, not timed, and the same code gives the same count to within about half a percent.
//
// Each target runs under callgrind (about fifty times slower), serving the bench's chat call to the echo upstream over
// HTTPS: first a warm-up (V8 optimises the hot path; nothing is counted), then a window of calls with the counting on
// (callgrind_control -i on/off). The event loop's thread is counted apart from the rest (V8's compiler and collector
// threads, the thread pool, lmdb's writer): its instructions per call are what limits the rate.
//
// Two things differ from a machine without valgrind: it hides the SHA extensions from OpenSSL, so SHA-256 counts
// several times the instructions it takes natively; and timers fire fifty times as often per call (the checkpoint
// signed every second, lmdb's batches every 10 ms), which the other threads mostly pay.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Agent, Pool } from 'undici';
import { appendResult } from '../results.js';
import {
  bareProxyArgs,
  benchModelReady,
  certificate,
  chatBody,
  enterPrivateNetwork,
  freePort,
  HEAP_FLAGS,
  ROOT,
  sovereignSetup,
  spawnServer,
  startEchoUpstream,
  stopServer,
  waitFor,
  workDir,
} from './servers.js';

const { values } = parseArgs({
  options: {
    calls: { type: 'string', default: '3000' },
    warmup: { type: 'string', default: '6000' },
    connections: { type: 'string', default: '16' },
    targets: { type: 'string', default: 'bare,sovereign' },
    functions: { type: 'string', default: '0' },
    streamed: { type: 'boolean', default: false },
    'host-network': { type: 'boolean', default: false },
  },
});

for (const tool of ['valgrind', 'callgrind_control', 'callgrind_annotate']) {
  if (spawnSync(tool, ['--help'], { stdio: 'ignore' }).error) {
    process.stderr.write(`bench:instructions needs valgrind's ${tool}: apt-get install valgrind\n`);
    process.exit(2);
  }
}
enterPrivateNetwork(values['host-network'], 'bench:instructions');

const calls = Number(values.calls);
const warmup = Number(values.warmup);
const connections = Number(values.connections);
const functions = Number(values.functions);
const streamed = values.streamed;
const targetNames = values.targets.split(',');
for (const name of targetNames)
  if (name !== 'bare' && name !== 'sovereign') throw new Error(`unknown target '${name}': use bare, sovereign`);

const work = workDir('sov-bench-instructions-');
const { base: upstreamBase } = await startEchoUpstream();
const { certFile, keyFile, ca } = certificate(work);
const agent = new Agent({ connect: { ca } });
await waitFor(`${upstreamBase}/models`, agent);

interface Counted {
  /** Instructions per call: the event loop's thread, and every thread of the process. */
  main: number;
  all: number;
  /** The main thread's callgrind file and V8's map of its compiled code (for --functions). */
  file: string;
  perfMap: string;
}

/** Starts `name` under callgrind with its counting off; resolves with its process, URL and the headers calls need. */
async function start(name: 'bare' | 'sovereign', out: string) {
  const port = await freePort();
  // V8 writes where it put each compiled function (/tmp/perf-<pid>.map), so that --functions can name JIT code.
  const callgrind = [
    '--tool=callgrind',
    '--smc-check=all-non-file',
    '--instr-atstart=no',
    '--separate-threads=yes',
    `--callgrind-out-file=${out}`,
  ];
  const node = [process.execPath, '--perf-basic-prof'];
  if (name === 'bare') {
    const child = spawnServer(
      'the bare proxy',
      'valgrind',
      [...callgrind, ...node, ...bareProxyArgs(port, upstreamBase, certFile, keyFile)],
      {
        TS_NODE_TRANSPILE_ONLY: '1',
      },
    );
    await waitFor(`https://127.0.0.1:${port}/health`, agent, {}, undefined, 300_000);
    return { child, origin: `https://127.0.0.1:${port}`, headers: {} };
  }
  const { configFile, secret } = sovereignSetup({ dir: work, port, upstreamBase, certFile, keyFile });
  const child = spawnServer('sovereign', 'valgrind', [
    ...callgrind,
    ...node,
    ...HEAP_FLAGS,
    join(ROOT, 'dist', 'cli', 'main.js'),
    'serve',
    '--config',
    configFile,
  ]);
  const headers = { authorization: `Bearer ${secret}` };
  await waitFor(`https://127.0.0.1:${port}/v1/health`, agent, headers, benchModelReady, 300_000);
  return { child, origin: `https://127.0.0.1:${port}`, headers };
}

/** `count` chat calls over `connections` keep-alive connections, each checked to be a complete 200 answer. */
async function load(pool: Pool, headers: Record<string, string>, count: number): Promise<void> {
  const body = chatBody('bench-chat', streamed);
  let left = count;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (left-- > 0) {
        const response = await pool.request({
          method: 'POST',
          path: '/v1/chat/completions',
          headers: { ...headers, 'content-type': 'application/json' },
          body,
        });
        const text = await response.body.text();
        const complete = streamed ? text.startsWith('data: ') && text.endsWith('data: [DONE]\n\n') : text.startsWith('{"id"');
        if (response.statusCode !== 200 || !complete) throw new Error(`a call failed: ${response.statusCode} ${text.slice(0, 200)}`);
      }
    }),
  );
}

function totalIn(file: string): number {
  const match = /^totals: (\d+)$/m.exec(readFileSync(file, 'utf8'));
  if (!match) throw new Error(`no totals in ${file}`);
  return Number(match[1]);
}

async function count(name: 'bare' | 'sovereign'): Promise<Counted> {
  const out = join(work, `callgrind-${name}.out`);
  process.stdout.write(`  ${name.padEnd(9)} starting under callgrind`);
  const { child, origin, headers } = await start(name, out);
  const pool = new Pool(origin, { connections, connect: { ca }, headersTimeout: 600_000, bodyTimeout: 600_000 });
  process.stdout.write(`, warm-up (${warmup} calls)`);
  await load(pool, headers, warmup);
  process.stdout.write(`, counting ${calls} calls`);
  execFileSync('callgrind_control', ['-i', 'on', String(child.pid)], { stdio: 'ignore' });
  await load(pool, headers, calls);
  execFileSync('callgrind_control', ['-i', 'off', String(child.pid)], { stdio: 'ignore' });
  await pool.close();
  await stopServer(child);
  process.stdout.write('\n');
  // With --separate-threads, one file per thread: <out>-01 is the main thread (the event loop).
  const files = readdirSync(work).filter((f) => f.startsWith(`callgrind-${name}.out-`));
  const main = join(work, `callgrind-${name}.out-01`);
  if (!existsSync(main)) throw new Error(`callgrind wrote no file for ${name}'s main thread`);
  const all = files.reduce((sum, f) => sum + totalIn(join(work, f)), 0);
  const perfMap = `/tmp/perf-${child.pid}.map`;
  process.on('exit', () => rmSync(perfMap, { force: true }));
  return { main: totalIn(main) / calls, all: all / calls, file: main, perfMap };
}

/** The main thread's functions by their own instructions per call, JIT code named from V8's map. */
function functionCosts(counted: Counted): Map<string, number> {
  const ranges = existsSync(counted.perfMap)
    ? readFileSync(counted.perfMap, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => {
          const [address, size, ...name] = line.split(' ');
          return { start: parseInt(address, 16), end: parseInt(address, 16) + parseInt(size, 16), name: name.join(' ') };
        })
        .sort((a, b) => a.start - b.start)
    : [];
  const named = (address: number) => {
    let lo = 0;
    let hi = ranges.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (ranges[mid].start <= address) lo = mid + 1;
      else hi = mid - 1;
    }
    const r = ranges[hi];
    return r && address < r.end ? r.name.replace(/^JS:/, '') : null;
  };
  const annotated = execFileSync('callgrind_annotate', ['--threshold=100', counted.file], { encoding: 'utf8', maxBuffer: 1 << 28 });
  const byName = new Map<string, number>();
  let listing = false;
  for (const line of annotated.split('\n')) {
    if (line.includes('file:function')) listing = true;
    const m = listing && /^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)$/.exec(line);
    if (!m) continue;
    let name = m[2].replace(/ \[[^\]]*\]$/, '').replace(/v8::internal::/g, '');
    const jit = /^\?\?\?:0x([0-9a-f]+)/.exec(name);
    if (jit) name = named(parseInt(jit[1], 16)) ?? '(compiled code not in the map)';
    byName.set(name, (byName.get(name) ?? 0) + Number(m[1].replace(/,/g, '')) / calls);
  }
  return byName;
}

/**
 * The daemon's costliest functions, each beside what the bare proxy spends in it (when it was counted): the difference
 * is the pipeline's share of that function (JIT names differ between the two only where the code does).
 */
function topFunctions(ours: Counted, bare: Counted | undefined, top: number): string {
  const mine = functionCosts(ours);
  const theirs = bare ? functionCosts(bare) : null;
  const head = theirs ? `  ${'sovereign'.padStart(9)}  ${'bare'.padStart(8)}\n` : '';
  return (
    head +
    [...mine]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, n]) => {
        const other = theirs ? `  ${(theirs.get(name) ?? 0).toFixed(0).padStart(8)}` : '';
        return `  ${n.toFixed(0).padStart(9)}${other}  ${name.slice(0, 140)}\n`;
      })
      .join('')
  );
}

process.stdout.write(
  `bench:instructions: ${calls} ${streamed ? 'streamed' : 'buffered'} calls counted after ${warmup} of warm-up, ${connections} connections\n`,
);
const counted = new Map<string, Counted>();
for (const name of targetNames as Array<'bare' | 'sovereign'>) counted.set(name, await count(name));
await agent.close();

const k = (n: number) => `${(n / 1000).toFixed(1)}k`;
process.stdout.write(`\ninstructions per call   main thread   all threads\n`);
for (const [name, c] of counted) process.stdout.write(`${name.padEnd(22)}  ${k(c.main).padStart(11)}   ${k(c.all).padStart(11)}\n`);
const bare = counted.get('bare');
const ours = counted.get('sovereign');
if (bare && ours) {
  process.stdout.write(
    `sovereign / bare: ${(ours.main / bare.main).toFixed(3)} (main thread); the pipeline's own: ${k(ours.main - bare.main)} per call\n`,
  );
}
if (ours && functions > 0)
  process.stdout.write(`\nsovereign's main thread, own instructions per call by function:\n${topFunctions(ours, bare, functions)}`);
appendResult(
  'instructions',
  { calls, warmup, connections, targets: targetNames, streamed, functions },
  {
    instructionsPerCall: Object.fromEntries([...counted].map(([name, c]) => [name, { mainThread: c.main, allThreads: c.all }])),
    sovereignOverBare: bare && ours ? ours.main / bare.main : null,
    pipelineMainThread: bare && ours ? ours.main - bare.main : null,
  },
);
process.exit(0);
