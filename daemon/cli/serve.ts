// `sovereign serve`: runs the daemon until SIGTERM or SIGINT, then drains in-flight calls and exits 0.
import { loadConfig } from '../config/index.js';
import { startDaemon } from '../service/index.js';
import { describeWriteFailure, writeFailureOf } from '../store/index.js';
import { COMMON_HELP, configFlags, parse, SERVE_OPTIONS, UsageError } from './args.js';

export const SERVE_HELP = `Usage: sovereign serve [options]

Runs the daemon in the foreground. On SIGTERM or SIGINT it stops accepting calls, lets in-flight calls finish
(up to timeouts.shutdownGraceMs) and exits 0 as soon as they have. A further signal during the drain is ignored.

Options (override the config file and the environment):
  --posture P         device | appliance | cloud | frontier; also SOVEREIGN_POSTURE
  --host ADDR         address to bind; also SOVEREIGN_HOST
  --port N            port to bind (0: any free port); also SOVEREIGN_PORT
  --region R          region for X-Region; also SOVEREIGN_REGION
${COMMON_HELP}`;

export async function serveCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, SERVE_OPTIONS);
  if (values.help) {
    process.stdout.write(`${SERVE_HELP}\n`);
    return 0;
  }
  if (positionals.length) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  const { config } = loadConfig(configFlags(values));
  const daemon = await startDaemon(config).catch((err: unknown) => {
    const full = writeFailureOf(err);
    throw full ? new Error(`cannot start: ${describeWriteFailure(full, (err as Error).message)}, then start again.`) : err;
  });
  // A closed stdout must not take the daemon down: log lines are dropped instead (see daemon/log).
  process.stdout.on('error', () => {});
  if (values.json) process.stdout.write(`${JSON.stringify({ event: 'listening', url: daemon.url, posture: config.posture })}\n`);

  return new Promise<number>((resolve) => {
    let draining = false;
    const stop = (signal: NodeJS.Signals) => {
      // A signal during the drain changes nothing: the calls in flight keep their grace (docs/architecture.md).
      if (draining) {
        daemon.app.log.info({ signal }, 'already draining in-flight calls');
        return;
      }
      draining = true;
      const closing = daemon.close();
      daemon.app.log.info({ signal }, 'draining in-flight calls');
      closing.then(
        () => resolve(0),
        (err: unknown) => {
          daemon.app.log.error({ err }, 'shutdown failed');
          resolve(1);
        },
      );
    };
    // Listeners for the life of the process, never `once`: signal-exit 3 (node-llama-cpp → proper-lockfile) kills the
    // process with the signal again when it finds no other listener, which a `once` listener no longer is by then.
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}
