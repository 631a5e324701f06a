// Usage, on /v1 when the call ends, finished or abandoned: the call counts for its key and route, and its tokens once
// the engine has stopped (an abandoned call's engine reports after its end). A client that reads a streamed answer and
// goes before its last bytes had the model's work, and its call is in the audit log: it counts as any other, or the
// usage billed (`sovereign usage export`) would leave it out. fastify's onResponse runs only for a response written
// to its end, so this runs at the call's end (lifetime.ts) instead.
import type { UsageMeter } from '../../usage/index.js';
import type { CallEndStage } from '../stage.js';
import { NO_ROUTE } from './audit.js';

export function usageStage(usage: UsageMeter): CallEndStage {
  return {
    name: 'usage',
    hook: 'callEnd',
    run(request, reply, finished) {
      const principal = request.call.principal;
      const call = request.call;
      // An abandoned call counts once a model worked for it; one abandoned before (a pipelined call reset with its
      // connection before it was handled) was never served, and is not counted, as before.
      if (!principal || (!finished && !call.engineWork)) return;
      const route = request.routeOptions.url ?? NO_ROUTE;
      // The status sent, or for a call abandoned before its answer, the one it had so far.
      usage.record(principal.keyId, route, reply.statusCode);
      const tokens = () => {
        if (call.usedTokens) usage.recordTokens(principal.keyId, route, call.usedTokens - call.completionTokens, call.completionTokens);
      };
      if (call.engineWork) void call.engineWork.then(tokens, tokens);
      else tokens();
    },
  };
}
