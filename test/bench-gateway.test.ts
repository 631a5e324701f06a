// npm run bench:gateway as a user runs it, in short windows: only the targets asked for are started and measured
// (HAProxy, the optional C reference, among them; cloud-postgres, the daemon on a PostgreSQL the bench starts), every
// row is printed with its failures, and options that cannot work are refused before anything starts. The daemon's and
// Portkey's figures are the default run's (bench/README.md); here they are left out to keep the test short.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { LOADER, ROOT } from '../bench/gateway/servers.js';
import { postgresUnavailable } from './fixtures/postgres.js';

// A run's record goes to a directory of the test's own, not to bench/results/ in the repository.
const results = mkdtempSync(join(tmpdir(), 'sov-bench-results-'));
t.teardown(() => rmSync(results, { recursive: true, force: true }));

function bench(args: string[]) {
  const r = spawnSync(process.execPath, ['--import', LOADER, join(ROOT, 'bench', 'gateway', 'index.ts'), ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, TS_NODE_TRANSPILE_ONLY: '1', SOVEREIGN_BENCH_RESULTS: results },
    timeout: 180_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

const SHORT = ['--rounds', '1', '--rates', '200', '--rate-seconds', '1', '--seconds', '1', '--warmup', '1'];

t.test('the targets asked for, HAProxy among them, buffered and streamed', async (t) => {
  const run = bench(['--targets', 'upstream,haproxy,bare', '--modes', 'buffered,streamed', ...SHORT]);
  t.equal(run.code, 0, run.err);
  for (const mode of ['buffered', 'streamed']) {
    const table = run.out.slice(run.out.indexOf(`\n${mode}\ntarget`));
    for (const target of ['upstream', 'haproxy', 'bare'])
      for (const load of ['200/s', 'saturation']) {
        // target, load, req/s, p50, p99, (added p50, added p99,) failed, cpu ms/call
        const row = new RegExp(`^${target} +${load} +(\\d+) +[\\d.]+ +[\\d.]+ +(?:-?[\\d.]+ +-?[\\d.]+ +)?(\\d+) +[\\d.]+$`, 'm').exec(
          table,
        );
        t.ok(row, `${mode} ${target} at ${load} is in the table`);
        t.equal(row?.[2], '0', `${mode} ${target} at ${load}: no call failed`);
        t.ok(Number(row?.[1]) > 0, `${mode} ${target} at ${load}: calls were answered`);
      }
  }
  t.notMatch(run.out, /^(sovereign|portkey) /m, 'targets not asked for are not measured');
  t.match(run.out, /goals: none judged/);
  const records = readFileSync(join(results, 'gateway.jsonl'), 'utf8').trim().split('\n');
  t.equal(records.length, 1, 'the run appended one record');
  const record = JSON.parse(records[0]) as {
    bench: string;
    options: { targets: string[] };
    figures: { modes: Record<string, { targets: Record<string, { saturation: { rps: number } }> }> };
  };
  t.equal(record.bench, 'gateway');
  t.same(record.options.targets, ['upstream', 'haproxy', 'bare']);
  t.ok(record.figures.modes.streamed.targets.haproxy.saturation.rps > 0, 'the record holds the figures printed');
});

t.test(
  'cloud-postgres: the daemon with its shared state in a PostgreSQL the bench starts',
  { skip: postgresUnavailable() ?? false },
  async (t) => {
    // Without the floor and the lmdb daemon, to keep the test short: the row, PostgreSQL's CPU, the audit log, and
    // every answered call billed in PostgreSQL.
    const run = bench(['--targets', 'cloud-postgres', '--modes', 'buffered', ...SHORT]);
    t.equal(run.code, 0, run.err);
    for (const load of ['200/s', 'saturation']) {
      const row = new RegExp(`^cloud-postgres +${load} +(\\d+) +[\\d.]+ +[\\d.]+ +(\\d+) +[\\d.]+$`, 'm').exec(run.out);
      t.ok(row, `cloud-postgres at ${load} is in the table`);
      t.equal(row?.[2], '0', `cloud-postgres at ${load}: no call failed`);
      t.ok(Number(row?.[1]) > 0, `cloud-postgres at ${load}: calls were answered`);
      t.match(run.out, new RegExp(`^  ${load} .*daemon cpu [\\d.]+ ms/call; PostgreSQL [\\d.]+ ms/call \\([\\d.]+% of a core\\)$`, 'm'));
    }
    t.match(run.out, /cloud-postgres audit: every answered call logged: met/);
    t.match(run.out, /cloud-postgres usage: every answered call billed in PostgreSQL: met/);
    const records = readFileSync(join(results, 'gateway.jsonl'), 'utf8').trim().split('\n');
    const record = JSON.parse(records[records.length - 1]) as {
      figures: { modes: { buffered: { targets: Record<string, { saturation: { rps: number; postgresCpuMsPerCall: number } }> } } };
    };
    const saturation = record.figures.modes.buffered.targets['cloud-postgres'].saturation;
    t.ok(saturation.rps > 0 && saturation.postgresCpuMsPerCall >= 0, "the record holds its figures, PostgreSQL's CPU among them");
  },
);

t.test('options that cannot work are refused before anything starts', async (t) => {
  const unknown = bench(['--targets', 'upstream,nginx']);
  t.not(unknown.code, 0);
  t.match(unknown.err, /unknown target 'nginx': use upstream, bare, sovereign, portkey, haproxy, cloud-postgres/);
  t.notMatch(unknown.out, /warm-up/);
  const profile = bench(['--targets', 'upstream,bare', '--profile', join(ROOT, 'never-written')]);
  t.not(profile.code, 0);
  t.match(profile.err, /--profile compares the daemon with the bare proxy: keep sovereign and bare in --targets/);
});
