// Running under systemd: the listening socket it passes (socket activation, sd_listen_fds) and the notifications it
// waits for (Type=notify: READY=1 once serving, WATCHDOG=1 at half the watchdog interval, STOPPING=1 on the way out),
// sent as datagrams to $NOTIFY_SOCKET with unix-dgram (Node has no unix datagram sockets of its own).
import { createRequire } from 'node:module';

/** systemd's first passed descriptor (SD_LISTEN_FDS_START). */
const FIRST_PASSED_FD = 3;

/**
 * The listening socket systemd passed to this process, if any: LISTEN_PID must be this process (the variables are
 * inherited by children, who must not take the socket). The variables are removed so that programs started later
 * do not see them.
 */
export function passedListenFd(env: NodeJS.ProcessEnv = process.env): { fd: number; count: number } | null {
  const pid = env.LISTEN_PID;
  const count = Number(env.LISTEN_FDS);
  if (pid === undefined) return null;
  delete env.LISTEN_PID;
  delete env.LISTEN_FDS;
  delete env.LISTEN_FDNAMES;
  if (pid !== String(process.pid) || !Number.isInteger(count) || count < 1) return null;
  return { fd: FIRST_PASSED_FD, count };
}

interface DgramSocket {
  send(buf: Buffer, offset: number, length: number, path: string, callback: (err?: Error) => void): void;
  close(): void;
  on(event: 'error', listener: (err: Error) => void): void;
}

interface NotifyLog {
  warn(obj: object, msg: string): void;
}

export interface Notifier {
  /** READY=1 with a status line; starts the watchdog pings if systemd asked for them. */
  ready(status: string): void;
  status(status: string): void;
  /** STOPPING=1; stops the watchdog pings and closes the socket. */
  stopping(): void;
}

const NONE: Notifier = { ready: () => {}, status: () => {}, stopping: () => {} };

/** The notifier for $NOTIFY_SOCKET, or one that does nothing when systemd did not ask to be told. */
export function systemdNotifier(log: NotifyLog, env: NodeJS.ProcessEnv = process.env): Notifier {
  const path = env.NOTIFY_SOCKET;
  if (!path) return NONE;
  // Only this process speaks for the service: children (tools it runs) must not inherit the socket, or systemd
  // hears from a process it does not know (as sd_notify's unset_environment does).
  delete env.NOTIFY_SOCKET;
  if (path.startsWith('@')) {
    log.warn({ notifySocket: path }, 'NOTIFY_SOCKET is an abstract socket, which unix-dgram cannot address: systemd is not notified');
    return NONE;
  }
  const dgram = createRequire(import.meta.url)('unix-dgram') as { createSocket(type: 'unix_dgram'): DgramSocket };
  const socket = dgram.createSocket('unix_dgram');
  socket.on('error', (err) => log.warn({ err: err.message }, 'cannot notify systemd'));
  const send = (message: string) => {
    const buf = Buffer.from(message);
    socket.send(buf, 0, buf.length, path, (err) => {
      if (err) log.warn({ err: err.message, message: message.split('\n')[0] }, 'cannot notify systemd');
    });
  };
  // WATCHDOG_USEC asks for pings; WATCHDOG_PID, when set, names the process that must send them.
  const watchdogUsec = Number(env.WATCHDOG_USEC);
  const watchdogPid = env.WATCHDOG_PID;
  const wantsWatchdog = Number.isFinite(watchdogUsec) && watchdogUsec > 0 && (!watchdogPid || watchdogPid === String(process.pid));
  let timer: NodeJS.Timeout | undefined;
  return {
    ready(status) {
      send(`READY=1\nSTATUS=${status}\nMAINPID=${process.pid}`);
      if (wantsWatchdog && !timer) {
        // Pinged from the event loop: a loop stuck for half the interval is what the watchdog is there to catch.
        timer = setInterval(() => send('WATCHDOG=1'), Math.max(1, Math.floor(watchdogUsec / 2000)));
        timer.unref();
      }
    },
    status(status) {
      send(`STATUS=${status}`);
    },
    stopping() {
      clearInterval(timer);
      timer = undefined;
      const buf = Buffer.from('STOPPING=1');
      socket.send(buf, 0, buf.length, path, () => socket.close());
    },
  };
}
