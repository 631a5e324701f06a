// A newcomer's first run, from the repository: `npm start` serves on the defaults, says where its state lives in its
// first line (a per-user directory, root's too), answers the keyless liveness route, and stops on SIGTERM.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import { cleanEnv, ROOT, tempDir } from './helpers/daemon.js';

interface LogLine {
  msg?: string;
  url?: string;
  dataDir?: string;
  posture?: string;
}

t.test('npm start serves, names its data directory first, and drains on SIGTERM', async (t) => {
  const home = tempDir(t);
  const env = {
    ...cleanEnv(),
    HOME: home,
    XDG_DATA_HOME: '',
    STATE_DIRECTORY: '',
    SOVEREIGN_AUDIT_SIGNER: 'software',
    // npm itself must not reach out (its update check) nor write outside the test's directory.
    npm_config_update_notifier: 'false',
    npm_config_cache: join(home, 'npm-cache'),
  };
  // --silent: npm's own banner is not the daemon's; every stdout line is then a log line.
  const npm = spawn('npm', ['--silent', 'start', '--', '--port', '0'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((res) => npm.once('exit', (code) => res(code)));
  t.teardown(() => {
    if (npm.exitCode === null && npm.signalCode === null) npm.kill('SIGKILL');
  });
  const lines: LogLine[] = [];
  const raw: string[] = [];
  createInterface({ input: npm.stderr }).on('line', (line) => raw.push(line));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`npm start did not serve:\n${raw.join('\n')}`)), 30_000);
    createInterface({ input: npm.stdout }).on('line', (line) => {
      raw.push(line);
      let entry: LogLine;
      try {
        entry = JSON.parse(line) as LogLine;
      } catch {
        t.fail(`a stdout line that is not a log line: ${line}`);
        return;
      }
      lines.push(entry);
      if (entry.msg === 'sovereign is serving' && entry.url) {
        clearTimeout(timer);
        res(entry.url);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      rej(new Error(`npm start exited with ${code}:\n${raw.join('\n')}`));
    });
  });

  const dataDir = join(home, '.local', 'share', 'sovereign');
  t.match(lines[0], { msg: 'sovereign is starting', posture: 'device', dataDir }, 'the first line says where state goes');
  t.match(url, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);

  const origin = url.replace(/\/v1$/, '');
  const live = await fetch(`${origin}/healthz`);
  t.equal(live.status, 200, 'a supervisor without a key calls /healthz');
  t.same(await live.json(), { status: 'alive' });
  t.equal((await fetch(`${url}/health`)).status, 401, '/v1/health needs a key');

  // npm passes the signal on to the daemon it runs (the script execs it): the daemon drains and exits 0.
  npm.kill('SIGTERM');
  t.equal(await exited, 0, 'npm exits 0: the daemon drained and exited');
  t.ok(
    lines.some((l) => l.msg === 'sovereign stopped'),
    'the daemon itself stopped',
  );
  await t.rejects(fetch(`${origin}/healthz`), 'nothing listens any more');
});
