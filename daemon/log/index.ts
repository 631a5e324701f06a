// One logger configuration for the daemon and the CLI: JSON lines on stdout (journald keeps them), secrets
// redacted wherever they could appear.
import type { FastifyServerOptions } from 'fastify';
import type { LogLevel } from '../config/index.js';

export const REDACTED_PATHS = ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization', 'secret', '*.secret'];

export function loggerOptions(level: LogLevel): FastifyServerOptions['logger'] {
  return { level, redact: { paths: REDACTED_PATHS, censor: '[redacted]' }, base: { service: 'sovereign' } };
}
