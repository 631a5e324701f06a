// A real PostgreSQL 15 (Debian's package) for one test: its own cluster in a temporary directory, listening on
// 127.0.0.1 at a free port, with its unix socket inside that directory. initdb refuses to run as root, and the tests
// run as root, so the server's commands run as the `postgres` user (runuser) on directories it owns.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';

const BIN = '/usr/lib/postgresql/15/bin';
// pg_ctl waits up to 30 s itself (-t 30); this bounds every command beyond that.
const TIMEOUT_MS = 45_000;

export interface Postgres {
  /** postgres://sovereign@127.0.0.1:PORT/sovereign; the password is in `passwordFile`, not here. */
  url: string;
  passwordFile: string;
  port: number;
  /** Runs SQL as the superuser through psql on the unix socket; returns stdout (psql -At). */
  psql(sql: string, database?: string): Promise<string>;
  /** Stops the server (pg_ctl stop -m fast, or -m immediate with {immediate:true}); start() brings it back on the same port and data. */
  stop(options?: { immediate?: boolean }): Promise<void>;
  start(): Promise<void>;
}

/** Why PostgreSQL cannot be started here (no binaries, not root), or null if it can. */
export function postgresUnavailable(): string | null {
  if (!existsSync(join(BIN, 'initdb'))) return `no PostgreSQL 15 in ${BIN} (on Debian: apt-get install postgresql-15)`;
  if (process.getuid?.() !== 0) return 'starting PostgreSQL as the postgres user needs root (runuser)';
  return null;
}

export async function startPostgres(t: Test, options: { fsync?: boolean } = {}): Promise<Postgres> {
  const unavailable = postgresUnavailable();
  if (unavailable) throw new Error(unavailable);
  // The postgres user must reach its directories: mkdtemp makes 0700 directories, owned by root.
  const dir = mkdtempSync(join(tmpdir(), 'sov-pg-'));
  chmodSync(dir, 0o755);
  const secrets = mkdtempSync(join(tmpdir(), 'sov-pg-secret-'));
  const data = join(dir, 'data');
  const socketDir = join(dir, 'run');
  const log = join(dir, 'run', 'postgres.log');
  const { uid, gid } = postgresUser();
  for (const d of [data, socketDir]) {
    mkdirSync(d, { mode: 0o700 });
    chownSync(d, uid, gid);
  }
  const port = await freePort();
  let running = false;

  const logTail = () => (existsSync(log) ? readFileSync(log, 'utf8').split('\n').slice(-30).join('\n') : '(no server log)');
  const asPostgres = (command: string, args: string[]) =>
    run('runuser', ['-u', 'postgres', '--', join(BIN, command), ...args], { cwd: dir });

  const stop = async ({ immediate = false }: { immediate?: boolean } = {}) => {
    if (!running) return;
    const r = await asPostgres('pg_ctl', ['stop', '-D', data, '-m', immediate ? 'immediate' : 'fast', '-w', '-t', '30']);
    if (r.code !== 0) throw new Error(`pg_ctl stop failed (${r.code}): ${r.stderr}${r.stdout}\nserver log:\n${logTail()}`);
    running = false;
  };
  const start = async () => {
    if (running) return;
    const r = await asPostgres('pg_ctl', ['start', '-D', data, '-l', log, '-w', '-t', '30']);
    if (r.code !== 0) throw new Error(`pg_ctl start failed (${r.code}): ${r.stderr}${r.stdout}\nserver log:\n${logTail()}`);
    running = true;
  };
  const psql = async (sql: string, database = 'postgres') => {
    // As root, over the socket, where the postgres superuser is trusted; -X: no ~/.psqlrc; -q: no command tags.
    const args = [
      '-X',
      '-q',
      '-At',
      '-v',
      'ON_ERROR_STOP=1',
      '-h',
      socketDir,
      '-p',
      String(port),
      '-U',
      'postgres',
      '-d',
      database,
      '-f',
      '-',
    ];
    const r = await run(join(BIN, 'psql'), args, { input: sql });
    if (r.code !== 0) throw new Error(`psql failed (${r.code}): ${r.stderr}`);
    return r.stdout;
  };

  t.teardown(async () => {
    try {
      // Whatever `running` says: a start that timed out may have left a server behind.
      if (existsSync(join(data, 'postmaster.pid'))) await asPostgres('pg_ctl', ['stop', '-D', data, '-m', 'immediate', '-w', '-t', '30']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(secrets, { recursive: true, force: true });
    }
  });

  // --no-sync: a test cluster need not survive the machine's crash, only the server's.
  const init = await asPostgres('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-locale', '-E', 'UTF8', '--no-sync']);
  if (init.code !== 0) throw new Error(`initdb failed (${init.code}): ${init.stderr}${init.stdout}`);
  const settings = [
    `listen_addresses = '127.0.0.1'`,
    `port = ${port}`,
    `unix_socket_directories = '${socketDir}'`,
    `max_connections = 100`,
    `shared_buffers = 16MB`,
    `password_encryption = 'scram-sha-256'`,
    // Without fsync a commit still reaches the kernel before it is acknowledged, so a server killed (stop -m
    // immediate) keeps it; synchronous_commit = off would lose the last commits of a killed server.
    ...(options.fsync ? [] : ['fsync = off', 'full_page_writes = off']),
  ];
  appendFileSync(join(data, 'postgresql.conf'), `\n# test/helpers/postgres.ts\n${settings.join('\n')}\n`);
  writeFileSync(join(data, 'pg_hba.conf'), 'local all postgres trust\nhost all all 127.0.0.1/32 scram-sha-256\n');
  await start();

  const password = randomBytes(18).toString('hex');
  const passwordFile = join(secrets, 'password');
  writeFileSync(passwordFile, password, { mode: 0o600 });
  await psql(`CREATE ROLE sovereign LOGIN PASSWORD '${password}';\nCREATE DATABASE sovereign OWNER sovereign;\n`);

  return { url: `postgres://sovereign@127.0.0.1:${port}/sovereign`, passwordFile, port, psql, stop, start };
}

function postgresUser(): { uid: number; gid: number } {
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('postgres:'));
  const [, , uid, gid] = line?.split(':') ?? [];
  if (uid === undefined || gid === undefined) throw new Error('no postgres user in /etc/passwd');
  return { uid: Number(uid), gid: Number(gid) };
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

/** Runs a command to its end within TIMEOUT_MS (then SIGKILL); never rejects on a non-zero exit. */
function run(
  command: string,
  args: string[],
  { cwd, input }: { cwd?: string; input?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    // Without the caller's PG* variables (PGOPTIONS, PGDATA, ...), which would change what the commands do.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PG')));
    const child = spawn(command, args, { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${command} ${args.join(' ')} did not finish within ${TIMEOUT_MS / 1000} s:\n${stderr}${stdout}`));
    }, TIMEOUT_MS);
    child.once('error', (err) => (clearTimeout(timer), reject(err)));
    child.once('close', (code) => (clearTimeout(timer), resolve({ code, stdout, stderr })));
    child.stdin.end(input ?? '');
  });
}
