// One logger configuration for the daemon and the CLI: JSON lines on stdout (journald keeps them), secrets
// redacted wherever they could appear. Writing a log line never fails the caller: if stdout is gone (a closed
// pipe), the line is dropped rather than thrown into a request or a signal handler.
import { writeSync } from 'node:fs';
import type { FastifyBaseLogger, FastifyServerOptions } from 'fastify';
import { pino, type DestinationStream, type LoggerOptions } from 'pino';
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

/**
 * The daemon's logger, made before anything that logs (the audit log opens before the HTTP app exists) and handed to
 * fastify as its instance. Takes what fastify's `logger` option takes: options (with `stream`, as fastify reads them),
 * or false for a logger that logs nothing.
 */
export function createLogger(options: FastifyServerOptions['logger']): FastifyBaseLogger {
  if (!options || options === true) return pino({ level: options ? 'info' : 'silent' });
  const { stream, ...rest } = options as LoggerOptions & { stream?: DestinationStream };
  return pino(rest, stream);
}

type Bindings = Parameters<FastifyBaseLogger['child']>[0];
type ChildLoggerOptions = NonNullable<Parameters<FastifyBaseLogger['child']>[1]>;
type Level = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
type LogArgs = Parameters<FastifyBaseLogger['info']>;

/**
 * A request's logger, made when the request first logs something its level lets through. fastify makes a pino child
 * for every request, and pino's child (bindings serialised, a new object on the parent's prototype chain) cost more
 * than anything else a call logs: most calls log nothing.
 */
class LazyChildLogger implements FastifyBaseLogger {
  private made: FastifyBaseLogger | null = null;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
  ) {}

  private get real(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.bindings));
  }

  get level(): string {
    return (this.made ?? this.parent).level;
  }

  set level(level: string) {
    this.real.level = level;
  }

  private log(level: Level, args: LogArgs): void {
    // A line the level drops makes no child (fastify logs its own at debug).
    const parent = this.parent as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean };
    if (this.made === null && parent.isLevelEnabled?.(level) === false) return;
    this.real[level](...args);
  }

  fatal(...args: LogArgs): void {
    this.log('fatal', args);
  }
  error(...args: LogArgs): void {
    this.log('error', args);
  }
  warn(...args: LogArgs): void {
    this.log('warn', args);
  }
  info(...args: LogArgs): void {
    this.log('info', args);
  }
  debug(...args: LogArgs): void {
    this.log('debug', args);
  }
  trace(...args: LogArgs): void {
    this.log('trace', args);
  }
  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.real.child(bindings, options);
  }
}

/**
 * fastify's childLoggerFactory: each request's logger is made lazily (LazyChildLogger), unless the route asks for
 * its own level or serializers.
 */
export function lazyChildLogger(logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger {
  return Object.keys(options).length ? logger.child(bindings, options) : new LazyChildLogger(logger, bindings);
}
