// What the gateway benchmarks share (index.ts: rates and saturation; instructions.ts: instructions per call): a private
// network namespace, the server processes (stopped when the bench exits), the echo upstream, a certificate, the
// daemon's configuration and key, and the chat call every target answers.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { request, type Agent } from 'undici';

export const ROOT = resolve(import.meta.dirname, '..', '..');
export const LOADER = join(ROOT, 'node_modules', '@tapjs', 'typescript', 'dist', 'esm', 'import.mjs');
export const BIN = join(ROOT, 'bin', 'sovereign');
/** The daemon's heap settings (bin/sovereign), for the processes started here that stand for it. */
export const HEAP_FLAGS = ['--max-semi-space-size=32', '--initial-old-space-size=256'];

export const PROMPT =
  'مرحباً، أرجو تحويل مبلغ ٥٠٠٠ ريال من حسابي SA03 8000 0000 6080 1016 7519 إلى حساب أخي بتاريخ ١٥/٠٣/٢٠٢٦، ' +
  'ورقم هويتي الوطنية 1000000008. Please also confirm that my card 4111 1111 1111 1111 was blocked after the ' +
  'transaction on 2026-03-14 (order #123456789), and call me back on +966 50 123 4567 before 5 pm. شكراً جزيلاً.';
export const SYSTEM = 'You are the bank’s assistant. Answer briefly, in the language of the question. أجب باختصار.';

/** The chat call every target answers: a system message and the bilingual prompt holding three values to scrub. */
export function chatBody(model: string, stream: boolean): string {
  return JSON.stringify({
    model,
    messages: [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: PROMPT },
    ],
    max_tokens: 256,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
}

/**
 * Runs this script again inside a network namespace of its own, with loopback only (unshare --net), unless it is
 * already there or `hostNetwork` says not to; the process then exits with the child's status.
 */
export function enterPrivateNetwork(hostNetwork: boolean, command: string): void {
  if (hostNetwork || process.env.SOVEREIGN_BENCH_NETNS === '1') return;
  if (spawnSync('unshare', ['--net', 'true']).status !== 0) {
    process.stderr.write(
      `${command} runs in a private network namespace (unshare --net), which needs root. Run it as root, or pass --host-network to run on the host (loopback only).\n`,
    );
    process.exit(2);
  }
  const child = spawnSync(
    'unshare',
    ['--net', '--', 'sh', '-c', 'ip link set lo up && exec "$@"', 'sh', process.execPath, ...process.execArgv, ...process.argv.slice(1)],
    { stdio: 'inherit', env: { ...process.env, SOVEREIGN_BENCH_NETNS: '1' } },
  );
  process.exit(child.status ?? 1);
}

const children: ChildProcess[] = [];
/** Servers the bench stops itself before the end (instructions.ts): their exit is no failure. */
const stoppedOnPurpose = new Set<ChildProcess>();
let stopping = false;

/** A working directory for this run, removed when the process exits, when the servers started here are stopped. */
export function workDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  process.on('exit', () => {
    stopping = true;
    for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  });
  process.on('SIGINT', () => process.exit(130));
  return dir;
}

/** The measuring is over: from now on a server that exits is not a failure of the bench. */
export function measuringDone(): void {
  stopping = true;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}

/** Starts a server process; if it exits before the bench ends, the bench stops and says why. */
export function spawnServer(name: string, command: string, args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  child.once('exit', (code, signal) => {
    if (!stopping && !stoppedOnPurpose.has(child)) {
      process.stderr.write(`${name} exited (${code ?? signal}) during the bench:\n${stderr}\n`);
      process.exit(1);
    }
  });
  return child;
}

/** Stops a server before the bench ends (SIGTERM) and resolves when it has exited. */
export function stopServer(child: ChildProcess): Promise<void> {
  stoppedOnPurpose.add(child);
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  return exited;
}

/** GETs `url` until it answers 200 and `ready` accepts the JSON body, within `ms` (30 s). */
export async function waitFor(
  url: string,
  agent: Agent,
  headers: Record<string, string> = {},
  ready: (body: unknown) => boolean = () => true,
  ms = 30_000,
): Promise<unknown> {
  const until = Date.now() + ms;
  let last = '';
  for (;;) {
    try {
      const res = await request(url, { headers, dispatcher: agent });
      const text = await res.body.text();
      if (res.statusCode === 200) {
        const body: unknown = text.startsWith('{') ? JSON.parse(text) : text;
        if (ready(body)) return body;
      }
      last = `status ${res.statusCode}: ${text.slice(0, 200)}`;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > until) throw new Error(`${url} was not ready within ${ms / 1000} s (${last})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * HAProxy (the distribution's package) in front of the echo upstream, serving the same certificate: one thread, TLS
 * in, plain HTTP out on reused connections, each request passed through unchanged. A proxy hop written in C, to set
 * what this machine lets any hop add beside what the bare proxy and the daemon add. Needs `haproxy` on the PATH.
 */
export function startHaproxy(dir: string, port: number, upstreamBase: string, certFile: string, keyFile: string): ChildProcess {
  if (spawnSync('haproxy', ['-v']).error)
    throw new Error('the haproxy target needs HAProxy on the PATH (on Debian: apt-get install haproxy)');
  // HAProxy reads the certificate and its key from one file.
  const pem = join(dir, 'haproxy.pem');
  writeFileSync(pem, readFileSync(certFile, 'utf8') + readFileSync(keyFile, 'utf8'), { mode: 0o600 });
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(
    config,
    [
      'global',
      '  nbthread 1',
      'defaults',
      '  mode http',
      '  timeout connect 5s',
      '  timeout client 60s',
      '  timeout server 60s',
      'frontend bench',
      `  bind 127.0.0.1:${port} ssl crt ${pem}`,
      '  default_backend echo',
      'backend echo',
      '  http-reuse always',
      `  server echo ${new URL(upstreamBase).host}`,
      '',
    ].join('\n'),
  );
  // -db: in the foreground, so that it is stopped with the bench.
  return spawnServer('haproxy', 'haproxy', ['-db', '-f', config]);
}

/** The echo upstream (echo-upstream.ts) on a free port; its OpenAI base URL. */
export async function startEchoUpstream(): Promise<{ child: ChildProcess; base: string }> {
  const port = await freePort();
  const child = spawnServer(
    'the echo upstream',
    process.execPath,
    ['--import', LOADER, join(import.meta.dirname, 'echo-upstream.ts'), String(port)],
    {
      TS_NODE_TRANSPILE_ONLY: '1',
    },
  );
  return { child, base: `http://127.0.0.1:${port}/v1` };
}

/** A self-signed certificate for 127.0.0.1 (P-256), which the daemon and the bare proxy serve. */
export function certificate(dir: string): { certFile: string; keyFile: string; ca: string } {
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2', '-subj', '/CN=127.0.0.1'].concat([
      '-addext',
      'subjectAltName=IP:127.0.0.1',
      '-keyout',
      keyFile,
      '-out',
      certFile,
    ]),
    { stdio: 'ignore' },
  );
  return { certFile, keyFile, ca: readFileSync(certFile, 'utf8') };
}

/**
 * The daemon's configuration for the bench: the cloud posture on `port`, routing `bench-chat` to the upstream, the
 * audit log signed by a software key every second; and a key whose limits (its own and its project's) are checked on
 * every call but never reached. Returns the config file and the key's secret. With `postgres`, the same daemon keeps
 * its shared state (projects, keys, usage) in that database (`store: "postgres"`), whose schema is made here first;
 * `name` keeps its config and data directory apart from another daemon's in the same `dir`.
 */
export function sovereignSetup(options: {
  dir: string;
  port: number;
  upstreamBase: string;
  certFile: string;
  keyFile: string;
  journalDir?: string | null;
  name?: string;
  postgres?: { url: string; passwordFile: string };
}): { configFile: string; secret: string } {
  const prefix = options.name ? `${options.name}-` : '';
  const configFile = join(options.dir, `${prefix}config.json`);
  writeFileSync(
    configFile,
    JSON.stringify({
      posture: 'cloud',
      region: 'bench-1',
      listen: { host: '127.0.0.1', port: options.port },
      tls: { cert: options.certFile, key: options.keyFile },
      dataDir: join(options.dir, `${prefix}data`),
      limits: { maxInFlight: 4096 },
      audit: { signer: 'software', checkpointMs: 1000, ...(options.journalDir ? { journalDir: options.journalDir } : {}) },
      log: { level: 'warn' },
      upstreams: [
        { name: 'echo', baseUrl: options.upstreamBase, models: [{ id: 'bench-chat', upstreamModel: 'echo', capability: 'chat' }] },
      ],
      ...(options.postgres ? { store: 'postgres', postgres: options.postgres } : {}),
    }),
  );
  const cli = (args: string[]) => execFileSync(BIN, [...args, '--config', configFile, '--json'], { encoding: 'utf8' });
  if (options.postgres) execFileSync(BIN, ['db', 'migrate', '--config', configFile], { encoding: 'utf8' });
  cli(['projects', 'create', 'bench']);
  cli(['projects', 'limits', 'bench', '--rpm', '100000000', '--tpm', '100000000000']);
  const key = JSON.parse(cli(['keys', 'create', '--project', 'bench', '--rpm', '100000000', '--tpm', '100000000000'])) as {
    secret: string;
  };
  return { configFile, secret: key.secret };
}

/** The bare proxy's command line (bare-proxy.ts, with the daemon's heap settings), given node flags before it. */
export function bareProxyArgs(port: number, upstreamBase: string, certFile: string, keyFile: string, nodeFlags: string[] = []): string[] {
  return [
    '--import',
    LOADER,
    ...HEAP_FLAGS,
    ...nodeFlags,
    join(import.meta.dirname, 'bare-proxy.ts'),
    String(port),
    upstreamBase,
    certFile,
    keyFile,
  ];
}

/** Whether the daemon's health lists the bench model as ready. */
export function benchModelReady(body: unknown): boolean {
  return (
    (body as { models?: Array<{ id: string; readiness: string }> }).models?.some((m) => m.id === 'bench-chat' && m.readiness === 'ready') ??
    false
  );
}
