// Usage, on /v1 once the response is written: the call counts for its key and route, and its tokens once the engine
// has stopped (an abandoned call's engine reports after its response).
import type { UsageMeter } from '../../usage/index.js';
import type { ResponseStage } from '../stage.js';

export function usageStage(usage: UsageMeter): ResponseStage {
  return {
    name: 'usage',
    hook: 'onResponse',
    run(request, reply) {
      const principal = request.call.principal;
      if (!principal) return;
      const route = request.routeOptions.url ?? 'unknown';
      usage.record(principal.keyId, route, reply.statusCode);
      const call = request.call;
      const tokens = () => {
        if (call.usedTokens) usage.recordTokens(principal.keyId, route, call.usedTokens - call.completionTokens, call.completionTokens);
      };
      if (call.engineWork) void call.engineWork.then(tokens, tokens);
      else tokens();
    },
  };
}
