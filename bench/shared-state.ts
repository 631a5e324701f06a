// What the shared state in PostgreSQL (store: "postgres") can take, for docs/scale-out.md: changes committed per
// second by 1, 2 and 4 replicas writing at once (each a Store of its own, as a replica has, in this one process),
// against the same changes on lmdb in the same run; and how long a change takes to reach another replica's copy.
// A change here is a stored response's (three records of about 400 bytes: the response, an item, its expiry), the
// most frequent shared write a replica makes per call. PostgreSQL runs with fsync on, as in a deployment.
//
//   npm run bench:shared-state                 options: --seconds N (per measurement, default 4), --inflight N
//                                              (changes each replica keeps in flight, default 8)
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { connectionConfig, connectShared, migrate, openStore, type Store } from '../daemon/store/index.js';
import { startPostgresCluster } from '../test/fixtures/postgres.js';
import { appendResult } from './results.js';

const { values } = parseArgs({ options: { seconds: { type: 'string' }, inflight: { type: 'string' } } });
const SECONDS = Number(values.seconds ?? 4);
const INFLIGHT = Number(values.inflight ?? 8);
const WRITERS = [1, 2, 4];
/** Propagation samples: changes made on one replica, timed until another's copy holds them. */
const SAMPLES = 300;

const postgres = await startPostgresCluster({ fsync: true });
process.on('exit', () => postgres.closeSync());
const options = { url: postgres.url, passwordFile: postgres.passwordFile, poolSize: 4 };
{
  const pool = new pg.Pool({ ...connectionConfig(options, 'bench'), max: 1 });
  await migrate(pool);
  await pool.end();
}
const dirs: string[] = [];
process.on('exit', () => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function replica(shared: boolean): Promise<Store> {
  const dir = mkdtempSync(join(tmpdir(), 'sov-bench-state-'));
  dirs.push(dir);
  const store = openStore(dir);
  if (shared) await connectShared(store, { store: 'postgres', postgres: options }, { serving: true });
  return store;
}

let sequence = 0;
/** One stored response's change: the response, one item, its expiry. */
function change(store: Store): Promise<void> {
  const id = `resp_${process.pid}_${sequence++}`;
  const text = 'x'.repeat(360);
  return store.update((tx) => {
    tx.put('responses', id, { project: 'proj_bench', expiresAt: Date.now() + 3_600_000, response: { id, text }, input: [`${id}_in`] });
    tx.put('response-items', `${id}_in`, { project: 'proj_bench', response: id, item: { id: `${id}_in`, text } });
    tx.put('responses-expiry', [Date.now() + 3_600_000, id], true);
  });
}

/** Postgres's processes' CPU time (user + system), in ms. */
function postgresCpuMs(): number {
  const tick = 10; // USER_HZ on Linux is 100
  let sum = 0;
  const parent = postgres.pid();
  if (!parent) return 0;
  for (const pid of [parent, ...children(parent)]) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      sum += (Number(fields[11]) + Number(fields[12])) * tick;
    } catch {
      // Gone meanwhile.
    }
  }
  return sum;
}

function children(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Changes per second the stores commit together, each keeping INFLIGHT in flight, for SECONDS. */
async function throughput(stores: Store[]): Promise<{ perSecond: number; p50Ms: number; p99Ms: number; cpuMs: number; pgCpuMs: number }> {
  const latencies: number[] = [];
  const until = performance.now() + SECONDS * 1000;
  const cpu = process.cpuUsage();
  const pgCpu = postgresCpuMs();
  const worker = async (store: Store) => {
    while (performance.now() < until) {
      const started = performance.now();
      await change(store);
      latencies.push(performance.now() - started);
    }
  };
  const started = performance.now();
  await Promise.all(stores.flatMap((store) => Array.from({ length: INFLIGHT }, () => worker(store))));
  const elapsed = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  latencies.sort((a, b) => a - b);
  return {
    perSecond: Math.round(latencies.length / elapsed),
    p50Ms: round(latencies[Math.floor(latencies.length * 0.5)]),
    p99Ms: round(latencies[Math.floor(latencies.length * 0.99)]),
    cpuMs: round((used.user + used.system) / 1000 / latencies.length, 3),
    pgCpuMs: round((postgresCpuMs() - pgCpu) / latencies.length, 3),
  };
}

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits;

const lmdb = await throughput([await replica(false)]);
const shared: Record<string, Awaited<ReturnType<typeof throughput>>> = {};
const replicas: Store[] = [];
for (const writers of WRITERS) {
  while (replicas.length < writers) replicas.push(await replica(true));
  shared[writers] = await throughput(replicas.slice(0, writers));
}

// Propagation: a change committed through replica 0, timed until replica 1's copy holds it.
const [from, to] = [replicas[0], replicas[1]];
const delays: number[] = [];
for (let i = 0; i < SAMPLES; i++) {
  const id = `probe_${i}`;
  const started = performance.now();
  await from.update((tx) => tx.put('responses', id, { project: 'proj_bench', probe: i }));
  const committed = performance.now();
  while (to.db('responses').get(id) === undefined && performance.now() - committed < 2000) await new Promise((r) => setImmediate(r));
  delays.push(performance.now() - started);
}
delays.sort((a, b) => a - b);
const propagation = { p50Ms: round(delays[Math.floor(SAMPLES * 0.5)]), p99Ms: round(delays[Math.floor(SAMPLES * 0.99)]) };

for (const store of replicas) await store.close();

const rows = [
  ['lmdb (one machine)', lmdb],
  ...WRITERS.map((w) => [`postgres, ${w} replica${w > 1 ? 's' : ''}`, shared[w]] as const),
] as const;
process.stdout.write(`shared-state changes (a stored response: 3 records), ${INFLIGHT} in flight per replica, ${SECONDS} s each\n\n`);
process.stdout.write('store                  changes/s   p50 ms   p99 ms   process CPU ms/change   PostgreSQL CPU ms/change\n');
for (const [name, r] of rows) {
  process.stdout.write(
    `${name.padEnd(22)} ${String(r.perSecond).padStart(9)} ${String(r.p50Ms).padStart(8)} ${String(r.p99Ms).padStart(8)} ${String(r.cpuMs).padStart(23)} ${String(r.pgCpuMs).padStart(26)}\n`,
  );
}
process.stdout.write(
  `\npostgres vs lmdb, changes/s: ${WRITERS.map((w) => `${w} replica${w > 1 ? 's' : ''} ${round(shared[w].perSecond / lmdb.perSecond, 2)}x`).join(', ')}\n`,
);
process.stdout.write(
  `a change reaches another replica's copy: p50 ${propagation.p50Ms} ms, p99 ${propagation.p99Ms} ms (from the start of its commit)\n`,
);

appendResult('shared-state', { seconds: SECONDS, inflight: INFLIGHT, writers: WRITERS }, { lmdb, postgres: shared, propagation });
await postgres.close();
