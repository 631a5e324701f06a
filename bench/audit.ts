// Audit log throughput and checkpoint lag: concurrent appends (as concurrent calls make them: each waits until its
// entry is on disk) against plain lmdb puts of the same bytes with the same batching and flushing (the storage cost
// alone), in one run; and, under that full load, the time from an append being durable to the first signed
// checkpoint that covers it.
//
//   npm run bench:audit                         256 concurrent appenders (half of limits.maxInFlight), 5 s per phase
//   options: --concurrency N, --seconds N, --checkpoint-ms N (default 1000, the shipped default)
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pino from 'pino';
import { AuditLog, canonicalJson, SoftwareSigner } from '../daemon/audit/index.js';
import { Checkpointer } from '../daemon/audit/checkpoint.js';
import { openStore } from '../daemon/store/index.js';
import { appendResult } from './results.js';

const { values } = parseArgs({
  options: { concurrency: { type: 'string' }, seconds: { type: 'string' }, 'checkpoint-ms': { type: 'string' } },
});
const concurrency = Number(values.concurrency ?? 256);
const seconds = Number(values.seconds ?? 5);
const checkpointMs = Number(values['checkpoint-ms'] ?? 1000);

const entry = (i: number) => ({
  v: 1,
  time: new Date().toISOString(),
  request_id: `req_${i.toString(16).padStart(32, '0')}`,
  key: 'key_abcdefghijklmnop',
  project: 'proj_abcdefghijklmnop',
  method: 'POST',
  route: '/v1/chat/completions',
  model: 'qwen2.5-7b-instruct',
  status: 200,
  region: 'sa-riyadh-1',
  redactions: { NATIONAL_ID: 1, IQAMA: 0, IBAN: 0, CARD: 0 },
  answer_redactions: { NATIONAL_ID: 0, IQAMA: 0, IBAN: 0, CARD: 0 },
  request_sha256: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  response_sha256: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
});

/** Runs `concurrency` loops of `op` for `seconds` (bounded by time); returns operations per second. */
async function drive(op: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const until = performance.now() + seconds * 1000;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) await op(next++);
    }),
  );
  return next / ((performance.now() - start) / 1000);
}

const dir = mkdtempSync(join(tmpdir(), 'sov-bench-audit-'));
try {
  const store = openStore(dir);
  // Baseline: the same canonical bytes, put under increasing keys, awaited and flushed like an append.
  const raw = store.bytes('bench-raw');
  const plainRate = await drive(async (i) => {
    await raw.put(i, Buffer.from(canonicalJson(entry(i))));
    await store.flushed();
  });

  // As the daemon opens it: durable through the write-ahead journal, lmdb written behind it.
  const log = AuditLog.open(store, { journalDir: dir });
  const signer = new SoftwareSigner(join(dir, 'key.pem'));
  const checkpoints = new Checkpointer(store, log, signer, {
    origin: 'bench',
    intervalMs: checkpointMs,
    heartbeatMs: 60_000,
    log: pino({ level: 'silent' }),
  });
  checkpoints.start();
  // Every 100th append: when it became durable, and when a checkpoint first covered it.
  const samples: Array<{ index: number; durableAt: number; coveredAt?: number }> = [];
  const watcher = setInterval(() => {
    const size = checkpoints.latest()?.size ?? 0;
    const now = performance.now();
    for (const s of samples) if (s.coveredAt === undefined && s.index < size) s.coveredAt = now;
  }, 5);
  const auditRate = await drive(async (i) => {
    const index = await log.append(entry(i));
    if (i % 100 === 0) samples.push({ index, durableAt: performance.now() });
  });
  // Let the last checkpoint land (bounded).
  for (
    const until = performance.now() + 3 * checkpointMs + 2000;
    performance.now() < until && samples.some((s) => s.coveredAt === undefined);
  ) {
    await new Promise((r) => setTimeout(r, 20));
  }
  clearInterval(watcher);
  await checkpoints.stop();
  await log.close();
  // Lag under full load: only appends made while appenders were running count (the tail after is unloaded).
  const lags = samples.filter((s) => s.coveredAt !== undefined).map((s) => s.coveredAt! - s.durableAt);
  lags.sort((a, b) => a - b);
  const pct = (p: number) => lags[Math.min(lags.length - 1, Math.floor((p / 100) * lags.length))] ?? NaN;
  await store.close();

  console.log(`${concurrency} concurrent appenders, ${seconds} s per phase, checkpoint every ${checkpointMs} ms`);
  console.log('');
  console.log(`plain lmdb put + flush (baseline)  ${Math.round(plainRate).toLocaleString()} entries/s`);
  console.log(`audit log append (Merkle, durable) ${Math.round(auditRate).toLocaleString()} entries/s`);
  console.log(`audit / baseline                   ${(auditRate / plainRate).toFixed(2)}`);
  console.log(
    `checkpoint lag (${lags.length} samples)     p50 ${pct(50).toFixed(0)} ms, p99 ${pct(99).toFixed(0)} ms, max ${lags.at(-1)?.toFixed(0)} ms`,
  );
  console.log(`checkpoints signed                  ${checkpoints.latest()?.seq ?? 0}`);
  console.log('');
  console.log(`goal: at least 20,000 entries/s     ${auditRate >= 20_000 ? 'met' : 'NOT met'}`);
  console.log(`goal: lag under 2 s at full load     ${(lags.at(-1) ?? Infinity) < 2000 ? 'met' : 'NOT met'}`);
  appendResult(
    'audit',
    { concurrency, seconds, checkpointMs },
    {
      baselineEntriesPerSecond: plainRate,
      auditEntriesPerSecond: auditRate,
      auditOverBaseline: auditRate / plainRate,
      lagSamples: lags.length,
      lagP50Ms: pct(50),
      lagP99Ms: pct(99),
      lagMaxMs: lags.at(-1) ?? null,
      checkpointsSigned: checkpoints.latest()?.seq ?? 0,
      goals: { atLeast20000EntriesPerSecond: auditRate >= 20_000, lagUnder2s: (lags.at(-1) ?? Infinity) < 2000 },
    },
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
