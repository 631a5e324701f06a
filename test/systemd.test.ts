// The systemd units in systemd/, and the daemon's side of running under them: systemd-analyze rates the service's
// hardening, and the daemon takes the listening socket systemd passes (systemd-socket-activate stands in for the
// .socket unit) and reports READY=1, WATCHDOG=1 and STOPPING=1 to $NOTIFY_SOCKET (a unix datagram socket this test
// binds, standing in for systemd's).
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { parseAccounting, systemdUnit } from '../daemon/egress/index.js';
import { BIN, createKey, ROOT, tempDir } from './helpers/daemon.js';
import { request } from './helpers/http.js';

const UNITS = join(ROOT, 'systemd');

t.test('systemd-analyze rates the service OK or better; the units seal it', async (t) => {
  const r = spawnSync('systemd-analyze', ['security', '--offline=yes', '--no-pager', join(UNITS, 'sovereign.service')], {
    encoding: 'utf8',
  });
  const level = /Overall exposure level for sovereign\.service: ([\d.]+) (\w+)/.exec(r.stdout);
  t.ok(level, `systemd-analyze printed an exposure level\n${r.stderr}`);
  t.ok(['SAFE', 'OK'].includes(level?.[2] ?? ''), `exposure ${level?.[1]} ${level?.[2]}`);
  const service = readFileSync(join(UNITS, 'sovereign.service'), 'utf8');
  for (const line of [
    'Type=notify',
    'PrivateNetwork=yes',
    'IPAddressDeny=any',
    'IPAccounting=yes',
    'NoNewPrivileges=yes',
    'ProtectSystem=strict',
    'StateDirectory=sovereign',
    'DeviceAllow=/dev/tpmrm0 rw',
    'MemoryDenyWriteExecute=no',
  ]) {
    t.match(service, new RegExp(`^${line.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`, 'm'), line);
  }
  t.match(service, /^WatchdogSec=\d+/m, 'a watchdog');
  t.match(readFileSync(join(UNITS, 'sovereign.socket'), 'utf8'), /^ListenStream=127\.0\.0\.1:8443$/m, 'device: loopback only');
});

t.test("a cloud replica's drop-ins open exactly its database, Redis and load balancers, and stay rated OK", async (t) => {
  const dir = tempDir(t);
  const service = readFileSync(join(UNITS, 'sovereign.service'), 'utf8');
  const dropIn = readFileSync(join(UNITS, 'cloud', 'sovereign.service.d', '10-cloud-node.conf'), 'utf8');
  t.match(dropIn, /^PrivateNetwork=no$/m, 'a replica reaches PostgreSQL and Redis');
  t.match(dropIn, /^IPAddressDeny=any$/m, 'and nothing it is not allowed');
  // A drop-in's settings apply after the unit's own: appended to its [Service] section, systemd-analyze rates both.
  const merged = join(dir, 'sovereign.service');
  writeFileSync(merged, service.replace('[Install]', `${dropIn.replace(/^\[Service\]$/m, '')}\n[Install]`));
  for (const unit of [merged, join(UNITS, 'cloud', 'sovereign-db-migrate.service')]) {
    const r = spawnSync('systemd-analyze', ['security', '--offline=yes', '--no-pager', unit], { encoding: 'utf8' });
    const level = /Overall exposure level for [\w.-]+: ([\d.]+) (\w+)/.exec(r.stdout);
    t.ok(level && ['SAFE', 'OK'].includes(level[2]), `${unit}: exposure ${level?.[1]} ${level?.[2]}\n${r.stderr}`);
  }
  const socket = readFileSync(join(UNITS, 'cloud', 'sovereign.socket.d', '10-cloud-node.conf'), 'utf8');
  t.match(socket, /^ListenStream=$/m, "the device's loopback address is replaced");
  t.match(socket, /^IPAddressDeny=any$/m, 'and only the load balancers may connect');
});

/** A port free right now on loopback. */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface DgramSocket {
  bind(path: string): void;
  on(event: 'message', listener: (buf: Buffer) => void): void;
  close(): void;
}

t.test('socket activation, READY=1, WATCHDOG=1 and STOPPING=1', async (t) => {
  const dir = tempDir(t);
  const key = createKey(dir);
  const notifyPath = join(dir, 'notify.sock');
  const dgram = createRequire(import.meta.url)('unix-dgram') as {
    createSocket(type: 'unix_dgram', listener?: (buf: Buffer) => void): DgramSocket;
  };
  const messages: string[] = [];
  let wake = () => {};
  const socket = dgram.createSocket('unix_dgram', (buf) => {
    messages.push(buf.toString());
    wake();
  });
  socket.bind(notifyPath);
  t.teardown(() => socket.close());
  const waitFor = (test: (m: string) => boolean, what: string, ms = 30_000) =>
    new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${what} within ${ms} ms; got ${JSON.stringify(messages)}`)), ms);
      const check = () => {
        const found = messages.find(test);
        if (found) {
          clearTimeout(timer);
          resolve(found);
        } else wake = check;
      };
      check();
    });

  const port = await freePort();
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    SOVEREIGN_DATA_DIR: dir,
    SOVEREIGN_AUDIT_SIGNER: 'software',
    NOTIFY_SOCKET: notifyPath,
    WATCHDOG_USEC: '400000',
  };
  const activator = spawn(
    'systemd-socket-activate',
    ['-l', `127.0.0.1:${port}`, ...Object.entries(env).flatMap(([k, v]) => ['-E', `${k}=${v}`]), BIN, 'serve'],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  activator.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => activator.once('exit', (code) => resolve(code)));
  t.teardown(() => {
    if (activator.exitCode === null) activator.kill('SIGKILL');
  });
  // systemd-socket-activate binds at once and starts the daemon on the first connection, as a .socket unit does.
  const until = Date.now() + 10_000;
  let first: Awaited<ReturnType<typeof request>> | undefined;
  while (!first && Date.now() < until) {
    first = await request(`http://127.0.0.1:${port}/v1/models`, { headers: { authorization: `Bearer ${key.secret}` } }).catch(
      async () => (await new Promise((r) => setTimeout(r, 100)), undefined),
    );
  }
  t.equal(first?.status, 200, `the first call, made before the daemon started, is answered on the passed socket\n${stderr}`);

  const ready = await waitFor((m) => m.startsWith('READY=1'), 'READY=1');
  t.match(ready, /STATUS=serving http:\/\/127\.0\.0\.1:\d+\/v1 \(device\)/);
  const mainPid = Number(/MAINPID=(\d+)/.exec(ready)?.[1]);
  t.equal(mainPid, activator.pid, 'the daemon is the process systemd started (LISTEN_PID matched)');
  await waitFor((m) => m === 'WATCHDOG=1', 'a first WATCHDOG=1');
  const pings = messages.filter((m) => m === 'WATCHDOG=1').length;
  await new Promise((r) => setTimeout(r, 1000));
  t.ok(messages.filter((m) => m === 'WATCHDOG=1').length >= pings + 3, 'WATCHDOG=1 every 200 ms (half of WATCHDOG_USEC)');

  process.kill(mainPid, 'SIGTERM');
  await waitFor((m) => m === 'STOPPING=1', 'STOPPING=1');
  t.equal(await exited, 0, 'a clean exit');
});

t.test('the systemd unit is read from the cgroup, only when systemd started the process', async (t) => {
  const dir = tempDir(t);
  const cgroup = join(dir, 'cgroup');
  writeFileSync(cgroup, '0::/system.slice/sovereign.service\n');
  t.equal(systemdUnit({ INVOCATION_ID: 'abc' }, cgroup), 'sovereign.service');
  t.equal(systemdUnit({}, cgroup), null, 'no INVOCATION_ID: not run by systemd');
  writeFileSync(cgroup, '0::/user.slice/user-0.slice/session-1.scope\n');
  t.equal(systemdUnit({ INVOCATION_ID: 'abc' }, cgroup), null, 'a scope is not a service');
  t.equal(systemdUnit({ INVOCATION_ID: 'abc' }, join(dir, 'missing')), null);
});

t.test('the kernel accounting systemctl prints is read; counters that are off read as null', async (t) => {
  t.match(parseAccounting('sovereign.service', 'IPEgressBytes=0\nIPEgressPackets=0\nNRestarts=2\n'), {
    unit: 'sovereign.service',
    ipEgressBytes: 0,
    ipEgressPackets: 0,
    restarts: 2,
  });
  t.match(parseAccounting('sovereign.service', 'IPEgressBytes=[not set]\nIPEgressPackets=18446744073709551615\nNRestarts=0\n'), {
    ipEgressBytes: null,
    ipEgressPackets: null,
    restarts: 0,
  });
});
