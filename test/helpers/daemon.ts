// Runs the real CLI and the real daemon as child processes, the way an operator does.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const BIN = join(ROOT, 'bin', 'sovereign');

export function tempDir(t: { teardown: (fn: () => void) => void }, prefix = 'sov-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
  json: any;
}

/** `prefix`: a command the CLI runs under (test/helpers/small-disk.ts enters a mount namespace so). */
export function cli(args: string[], env: NodeJS.ProcessEnv = {}, input?: string, prefix: string[] = []): CliResult {
  const [command, ...rest] = [...prefix, BIN, ...args] as [string, ...string[]];
  const r = spawnSync(command, rest, {
    encoding: 'utf8',
    env: { ...cleanEnv(), ...env },
    timeout: 30_000,
    ...(input !== undefined ? { input } : {}),
  });
  let json: unknown;
  try {
    json = JSON.parse(r.stdout);
  } catch {
    json = undefined;
  }
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, json };
}

/** The test runner's environment without any SOVEREIGN_* that could leak in from the developer's shell. */
export function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  // NODE_OPTIONS carries the test runner's loaders, which the daemon must not run under.
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('SOVEREIGN_') && k !== 'NODE_OPTIONS') env[k] = v;
  return env;
}

export interface RunningDaemon {
  url: string;
  /** Base URL for the OpenAI SDK: `${origin}/v1`. */
  baseURL: string;
  origin: string;
  proc: ChildProcess;
  logs: string[];
  /**
   * Whether a log line containing `text` (or one `text` accepts) arrives within `ms`. The daemon's lines reach the
   * test through a pipe, after the HTTP answer that caused them may already have: a test waits for the line rather
   * than reading `logs` at once.
   */
  logged(text: string | ((line: string) => boolean), ms?: number): Promise<boolean>;
  /** Sends SIGTERM and resolves with the exit code. */
  stop(): Promise<number | null>;
  exited: Promise<number | null>;
}

export async function startDaemon(
  t: { teardown: (fn: () => void | Promise<void>) => void },
  args: string[],
  env: NodeJS.ProcessEnv = {},
  /** A command the daemon runs under, which must exec it (its pid is the daemon's). */
  prefix: string[] = [],
): Promise<RunningDaemon> {
  const [command, ...rest] = [...prefix, BIN, 'serve', '--port', '0', ...args] as [string, ...string[]];
  const proc = spawn(command, rest, {
    // Checkpoints are signed by a software key unless a test brings its own TPM (test/audit-tpm.test.ts does). One
    // inference thread: the suite runs two files at a time on two cores, and llama.cpp's threads spin at each step's
    // barrier, so two daemons of two threads each would take turns by the scheduler's timeslice.
    // The Prometheus endpoint (on by default on cloud and frontier) on a free port: daemons run side by side here.
    env: { ...cleanEnv(), SOVEREIGN_AUDIT_SIGNER: 'software', SOVEREIGN_MODELS_THREADS: '1', SOVEREIGN_METRICS_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: string[] = [];
  const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`daemon did not start:\n${logs.join('\n')}`)), 20_000);
    createInterface({ input: proc.stdout }).on('line', (line) => {
      logs.push(line);
      try {
        const entry = JSON.parse(line) as { msg?: string; url?: string };
        if (entry.msg === 'sovereign is serving' && entry.url) {
          clearTimeout(timer);
          res(entry.url);
        }
      } catch {
        /* not a log line */
      }
    });
    createInterface({ input: proc.stderr }).on('line', (line) => logs.push(line));
    void exited.then((code) => {
      clearTimeout(timer);
      rej(new Error(`daemon exited with ${code}:\n${logs.join('\n')}`));
    });
  });
  let stopping = false;
  // A daemon that dies on its own after it started is a finding: its last words go to the test's output.
  proc.once('exit', (code, signal) => {
    if (!stopping && signal !== 'SIGKILL' && code !== 0) {
      const why = signal ? `was killed by ${signal}` : `exited with ${code}`;
      process.stderr.write(`the daemon (${args.join(' ')}) ${why}; its last log lines:\n${logs.slice(-30).join('\n')}\n`);
    }
  });
  const stop = async () => {
    stopping = true;
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    return exited;
  };
  t.teardown(async () => {
    await stop();
  });
  const origin = url.replace(/\/v1$/, '');
  const logged = async (text: string | ((line: string) => boolean), ms = 5_000) => {
    const accepts = typeof text === 'string' ? (line: string) => line.includes(text) : text;
    for (const until = Date.now() + ms; ;) {
      if (logs.some(accepts)) return true;
      if (Date.now() >= until) return false;
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  return { url, baseURL: url, origin, proc, logs, logged, stop, exited };
}

/** A project and an active key in a data dir; returns the key's id and secret. */
export function createKey(dataDir: string, project = 'acme', extra: string[] = [], prefix: string[] = []): { id: string; secret: string } {
  cli(['projects', 'create', project, '--data-dir', dataDir], {}, undefined, prefix);
  const r = cli(['keys', 'create', '--project', project, '--data-dir', dataDir, '--json', ...extra], {}, undefined, prefix);
  if (r.code !== 0) throw new Error(`keys create failed: ${r.stderr}`);
  return { id: r.json.id, secret: r.json.secret };
}

/** Polls /v1/health until every id is ready (or fails the wait after `ms`). */
export async function waitForModels(baseURL: string, secret: string, ids: string[], ms = 20_000): Promise<any> {
  const until = Date.now() + ms;
  for (;;) {
    const res = await fetch(`${baseURL}/health`, { headers: { authorization: `Bearer ${secret}` } });
    const health = (await res.json()) as { models: Array<{ id: string; readiness: string }> };
    const ready = ids.every((id) => health.models.some((m) => m.id === id && m.readiness === 'ready'));
    if (ready) return health;
    if (Date.now() > until) throw new Error(`models ${ids.join(', ')} not ready: ${JSON.stringify(health)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
