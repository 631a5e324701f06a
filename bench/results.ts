// Every benchmark run leaves a record: one JSON object appended as one line to bench/results/<bench>.jsonl, saying
// which code ran (commit, dirty or not), when, on what machine, with which options, and the figures it printed.
// The files are data: runs append to them and they are committed as they are; nothing here reads them back.
//
// Contract:
// - appendResult MUST be called once per run, after the run has printed its figures, with the options as the run
//   used them (defaults resolved) and the figures it printed (its goals' ratios and verdicts among them);
// - it MUST NOT print to stdout (what a benchmark prints is its own); it names the file it wrote on stderr;
// - SOVEREIGN_BENCH_RESULTS=DIR writes the record to DIR/<bench>.jsonl instead (tests use it, so that running a
//   benchmark under test leaves no record in the repository).
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync } from 'node:fs';
import { availableParallelism, cpus, hostname, totalmem } from 'node:os';
import { join, relative, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');

/** Plain JSON values: what a record's options and figures may hold. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json | undefined };

export interface ResultRecord {
  bench: string;
  /** The checked-out commit, and whether tracked files differed from it (bench/results/ aside); null outside git. */
  commit: { sha: string; dirty: boolean } | null;
  /** When the record was written (ISO 8601, UTC). */
  date: string;
  machine: { hostname: string; cpu: string; cores: number; memoryBytes: number; node: string };
  options: Record<string, Json | undefined>;
  figures: Record<string, Json | undefined>;
}

function git(args: string[]): string {
  return execFileSync('git', args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
}

/** The commit the working tree is on; dirty when a tracked file differs from it (the results files do not count). */
export function currentCommit(): ResultRecord['commit'] {
  try {
    const sha = git(['rev-parse', '--short', 'HEAD']);
    const changes = git(['status', '--porcelain', '--untracked-files=no', '--', '.', ':(exclude)bench/results']);
    return { sha, dirty: changes !== '' };
  } catch {
    return null;
  }
}

export function machine(): ResultRecord['machine'] {
  return {
    hostname: hostname(),
    cpu: cpus()[0]?.model.trim() ?? 'unknown',
    cores: availableParallelism(),
    memoryBytes: totalmem(),
    node: process.version,
  };
}

/** Numbers as a run prints them: at most three decimals; NaN and infinities (nothing measured) as null. */
function tidy(value: unknown): Json | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? Math.round(value * 1000) / 1000 : null;
  if (Array.isArray(value)) return value.map((v) => tidy(v) ?? null);
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([key, v]) => [key, tidy(v)]));
  return value as Json | undefined;
}

/** The directory records go to: bench/results, or SOVEREIGN_BENCH_RESULTS when set. */
export function resultsDir(): string {
  return process.env.SOVEREIGN_BENCH_RESULTS ? resolve(process.env.SOVEREIGN_BENCH_RESULTS) : join(ROOT, 'bench', 'results');
}

/** Appends this run's record to <results dir>/<bench>.jsonl and returns it. */
export function appendResult(bench: string, options: Record<string, unknown>, figures: Record<string, unknown>): ResultRecord {
  const record: ResultRecord = {
    bench,
    commit: currentCommit(),
    date: new Date().toISOString(),
    machine: machine(),
    options: tidy(options) as ResultRecord['options'],
    figures: tidy(figures) as ResultRecord['figures'],
  };
  const dir = resultsDir();
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${bench}.jsonl`);
  appendFileSync(file, `${JSON.stringify(record)}\n`);
  process.stderr.write(`result recorded in ${relative(process.cwd(), file) || file}\n`);
  return record;
}
