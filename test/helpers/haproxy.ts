// HAProxy (Debian's package, 2.6) in front of several daemons on loopback, as an operator runs a cluster behind a
// load balancer: round robin, health checks on the daemons' health endpoint, retries of failed connections and empty
// or timed-out responses on another daemon. The frontend speaks plain HTTP on 127.0.0.1; the backends speak HTTP, or
// HTTPS with certificates that are not verified (self-signed in tests).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';

const START_MS = 30_000;

export interface Backend {
  host: string;
  port: number;
  /** The server's name in the config and HAProxy's logs: letters, digits, `-`, `_`, `.`. */
  name: string;
}

export interface Haproxy {
  /** The frontend's port on 127.0.0.1. */
  port: number;
  /** Stops HAProxy (SIGTERM) and resolves when it has exited. */
  stop(): Promise<void>;
}

/** Why HAProxy cannot be started here, or null if it can. */
export function haproxyUnavailable(): string | null {
  return spawnSync('haproxy', ['-v']).error ? 'no haproxy on the PATH (on Debian: apt-get install haproxy)' : null;
}

export function haproxyConfig(port: number, backends: Backend[], { tls = false, healthPath = '/v1/health' } = {}): string {
  return [
    'global',
    '  nbthread 1',
    '  maxconn 1000',
    'defaults',
    '  mode http',
    '  timeout connect 1s',
    '  timeout client 60s',
    '  timeout server 60s',
    '  retries 3',
    '  option redispatch',
    // Beyond conn-failure these are L7 retries: HAProxy resends the request, POSTs included, if it fits its buffer
    // (16 kB by default); a larger body is not retried.
    '  retry-on conn-failure empty-response response-timeout',
    'frontend front',
    `  bind 127.0.0.1:${port}`,
    '  default_backend daemons',
    'backend daemons',
    '  balance roundrobin',
    `  option httpchk GET ${healthPath}`,
    ...backends.map((b) => `  server ${b.name} ${b.host}:${b.port} check inter 500 fall 2 rise 1${tls ? ' ssl verify none' : ''}`),
    '',
  ].join('\n');
}

export async function startHaproxy(t: Test, backends: Backend[], options: { tls?: boolean; healthPath?: string } = {}): Promise<Haproxy> {
  const unavailable = haproxyUnavailable();
  if (unavailable) throw new Error(unavailable);
  if (backends.length === 0) throw new Error('startHaproxy needs at least one backend');
  const dir = mkdtempSync(join(tmpdir(), 'sov-haproxy-'));
  const port = await freePort();
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(config, haproxyConfig(port, backends, options));
  const check = spawnSync('haproxy', ['-c', '-f', config], { encoding: 'utf8' });
  if (check.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`haproxy rejects its config:\n${check.stdout}${check.stderr}`);
  }

  // -db: in the foreground, one process, so that its pid is ours to stop.
  const proc = spawn('haproxy', ['-db', '-f', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (d: Buffer) => (output = (output + d.toString()).slice(-8000));
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    await exited;
  };
  t.teardown(async () => {
    try {
      await stop();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const until = Date.now() + START_MS; ;) {
    if (proc.exitCode !== null || proc.signalCode !== null)
      throw new Error(`haproxy exited (${proc.exitCode ?? proc.signalCode}) before it listened:\n${output}`);
    if (await accepts(port)) break;
    if (Date.now() > until) throw new Error(`haproxy did not listen on 127.0.0.1:${port} within ${START_MS / 1000} s:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { port, stop };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}
