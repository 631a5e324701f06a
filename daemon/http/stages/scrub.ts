// Scrub, on routes whose body holds text for a model: every such text is scrubbed of personal data before the handler
// runs (daemon/scrub/). A field that cannot be scrubbed is the client's 400; a failure to scrub is 500 and nothing
// reaches the engine.
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../../errors/index.js';
import { NotCopyable, OFFLOAD_FROM, SCRUB_BODY, ScrubSession, scrubOffLoop, type BodyKind } from '../../scrub/index.js';
import type { RequestStage } from '../stage.js';

export function scrubStage(): RequestStage {
  return {
    name: 'scrub',
    hook: 'preHandler',
    run(request) {
      const kind = request.routeOptions.config.declaration?.scrub;
      if (kind && request.body !== undefined) return scrubRequest(request, kind, request.body);
    },
  };
}

/**
 * The scrub stage's work, also for a handler whose texts only exist once it has read them (a multipart upload): replaces
 * personal data in every text of `body` an engine will see and records the session and counts on the call. A body
 * of OFFLOAD_FROM bytes or more is scrubbed in a worker thread (the promise resolves once `body` holds the scrubbed
 * texts); a smaller one here and now.
 */
export function scrubRequest(request: FastifyRequest, kind: BodyKind, body: unknown): void | Promise<void> {
  const failed = (err: unknown): never => {
    // A field refused (a name that holds an ID, a schema nested too deep) is the client's to fix.
    if (err instanceof ApiError) throw err;
    // Fail closed: a text that could not be checked must not reach a model.
    request.log.error({ err: (err as Error).message }, 'scrubbing failed');
    throw new ApiError(
      'internal_error',
      'Personal-data scrubbing failed, so nothing was sent to the model. Retry; if it persists, report the X-Request-Id.',
    );
  };
  const done = (session: ScrubSession) => {
    request.call.redactions = session.counts();
    request.call.scrubSession = session;
  };
  const here = () => {
    const session = new ScrubSession();
    try {
      SCRUB_BODY[kind](body, session);
    } catch (err) {
      failed(err);
    }
    done(session);
  };
  if (request.call.bodyBytes < OFFLOAD_FROM) return here();
  return scrubOffLoop(kind, body).then(
    ({ body: scrubbed, session }) => {
      Object.assign(body as object, scrubbed);
      done(session);
    },
    (err: unknown) => (err instanceof NotCopyable ? here() : failed(err)),
  );
}
