// Watch body, on every request: a body that goes timeouts.bodyIdleMs without a byte (body-idle.ts) gets 408 in
// OpenAI's shape, with the call's own headers, and its connection is closed once that has gone out.
import { ApiError } from '../../errors/index.js';
import { BodyIdleWatch } from '../body-idle.js';
import { cutOffCall } from '../errors.js';
import { isInProcess } from '../in-process.js';
import type { RequestStage } from '../stage.js';

export interface WatchBodyDeps {
  config: { timeouts: { bodyIdleMs: number } };
  fixedHeaders: Record<string, string>;
}

export function watchBodyStage(deps: WatchBodyDeps): RequestStage {
  const idleMs = deps.config.timeouts.bodyIdleMs;
  const watch = new BodyIdleWatch(idleMs, (request) => {
    const error = new ApiError(
      'request_timeout',
      `The request body stopped arriving: nothing came for ${idleMs / 1000} s (timeouts.bodyIdleMs). Send the whole body without pausing.`,
    );
    request.log.info({ idleMs }, 'a request body stopped arriving; the connection is closed');
    // Its audit entry says 408 too (the body's reading then fails, and the error handler reads it).
    cutOffCall(request, error, 'Request Timeout', deps.fixedHeaders);
  });
  return {
    name: 'watch body',
    hook: 'onRequest',
    // A call the daemon makes to itself (a batch's line) has no connection to watch.
    run: (request, reply) => (isInProcess(request) ? undefined : watch.watch(request, reply)),
    close: () => watch.close(),
  };
}
