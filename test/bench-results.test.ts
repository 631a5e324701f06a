// bench/results.ts: every benchmark run appends one JSON line to <results dir>/<bench>.jsonl, saying which commit ran
// (and whether the tree was dirty), when, on what machine, with which options, and the figures it printed.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { appendResult, resultsDir, type ResultRecord } from '../bench/results.js';

t.test('a run appends one line per call, with its commit, machine, options and figures', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sov-bench-results-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const saved = process.env.SOVEREIGN_BENCH_RESULTS;
  process.env.SOVEREIGN_BENCH_RESULTS = dir;
  t.teardown(() => {
    if (saved === undefined) delete process.env.SOVEREIGN_BENCH_RESULTS;
    else process.env.SOVEREIGN_BENCH_RESULTS = saved;
  });
  t.equal(resultsDir(), dir);

  appendResult('trial', { rounds: 3 }, { rate: 1 / 3, missing: NaN, goals: { fast: true } });
  appendResult('trial', { rounds: 4 }, { rate: 2 });
  const lines = readFileSync(join(dir, 'trial.jsonl'), 'utf8').split('\n');
  t.equal(lines.length, 3, 'two lines, each ended by a newline');
  t.equal(lines[2], '');
  const [first, second] = lines.slice(0, 2).map((line) => JSON.parse(line) as ResultRecord);
  t.equal(first.bench, 'trial');
  t.match(first.commit, { sha: /^[0-9a-f]{4,}$/, dirty: Boolean });
  t.ok(!Number.isNaN(Date.parse(first.date)) && first.date.endsWith('Z'), 'an ISO date in UTC');
  t.match(first.machine, { hostname: String, cpu: String, cores: Number, memoryBytes: Number, node: process.version });
  t.same(first.options, { rounds: 3 });
  t.same(first.figures, { rate: 0.333, missing: null, goals: { fast: true } }, 'three decimals; nothing measured is null');
  t.same(second.options, { rounds: 4 });
});
