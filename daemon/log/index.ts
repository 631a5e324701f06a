// One logger configuration for the daemon and the CLI: JSON lines on stdout (journald keeps them), secrets
// redacted wherever they could appear. Writing a log line never fails the caller: if stdout is gone (a closed
// pipe), the line is dropped rather than thrown into a request or a signal handler.
import { writeSync } from 'node:fs';
import type { FastifyServerOptions } from 'fastify';
import type { LogLevel } from '../config/index.js';

export const REDACTED_PATHS = ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization', 'secret', '*.secret'];

const stdoutLines = {
  write(line: string): void {
    try {
      writeSync(1, line);
    } catch {
      // EPIPE or EAGAIN on stdout: nowhere to log to, and nothing better to do than go on serving.
    }
  },
};

export function loggerOptions(level: LogLevel): FastifyServerOptions['logger'] {
  return { level, redact: { paths: REDACTED_PATHS, censor: '[redacted]' }, base: { service: 'sovereign' }, stream: stdoutLines };
}
