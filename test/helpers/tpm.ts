// A software TPM (swtpm) for tests: the same tpm2-tools commands the daemon runs against /dev/tpmrm0 on a device.
import { spawn } from 'node:child_process';
import net from 'node:net';
import { tempDir } from './daemon.js';

function portFree(port: number): Promise<boolean> {
  return new Promise((res) => {
    const server = net.createServer();
    server.once('error', () => res(false));
    server.listen(port, '127.0.0.1', () => server.close(() => res(true)));
  });
}

/** Starts swtpm on two free consecutive loopback ports; stopped (by its pid) when the test ends. */
export async function startSwtpm(t: { teardown: (fn: () => void) => void }): Promise<string> {
  const state = tempDir(t);
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 20000);
    if (!(await portFree(port)) || !(await portFree(port + 1))) continue;
    const proc = spawn(
      'swtpm',
      [
        'socket',
        '--tpm2',
        '--server',
        `type=tcp,port=${port},bindaddr=127.0.0.1`,
        '--ctrl',
        `type=tcp,port=${port + 1},bindaddr=127.0.0.1`,
        '--flags',
        'not-need-init,startup-clear',
        '--tpmstate',
        `dir=${state}`,
      ],
      { stdio: 'ignore' },
    );
    t.teardown(() => {
      proc.kill('SIGTERM');
    });
    for (let i = 0; i < 50; i++) {
      const up = await new Promise<boolean>((res) => {
        const socket = net.connect(port, '127.0.0.1', () => {
          socket.destroy();
          res(true);
        });
        socket.once('error', () => res(false));
      });
      if (up) return `swtpm:host=127.0.0.1,port=${port}`;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('swtpm did not start');
  }
  throw new Error('no free port pair for swtpm');
}
