// Identify, on every response (404s and errors too, outside /v1 as well): the call's context, the headers fixed for
// the life of the process, its request id; and 503 while the daemon drains.
import { ApiError } from '../../errors/index.js';
import { bindRequest, newCallContext } from '../context.js';
import type { RequestStage } from '../stage.js';

export interface IdentifyDeps {
  /** X-Region and X-Sovereign, fixed for the life of the process. */
  fixedHeaders: Record<string, string>;
  state: { draining: boolean };
}

export function identifyStage(deps: IdentifyDeps): RequestStage {
  const fixed = Object.entries(deps.fixedHeaders);
  return {
    name: 'identify',
    hook: 'onRequest',
    run(request, reply) {
      request.call = newCallContext();
      bindRequest(request);
      for (const [name, value] of fixed) reply.header(name, value);
      reply.header('x-request-id', request.id);
      if (deps.state.draining) {
        reply.header('connection', 'close');
        throw new ApiError('server_overloaded', 'The daemon is shutting down. Retry in a few seconds.', {
          headers: { 'retry-after': '2' },
        });
      }
    },
  };
}
