// The operator's counters (daemon/metrics), on /v1 when the call ends: every call counts, refused ones included (errors
// by code are what an operator looks for), with its model, its duration and its redactions; its tokens once the
// engine has stopped.
import type { OperatorMetrics } from '../../metrics/index.js';
import type { CallEndStage } from '../stage.js';

export function metricsStage(metrics: OperatorMetrics): CallEndStage {
  return {
    name: 'metrics',
    hook: 'callEnd',
    run(request, reply) {
      const call = request.call;
      if (!call) return;
      const model = call.model?.id ?? null;
      metrics.recordCall({
        model,
        status: reply.statusCode,
        errorCode: call.errorCode,
        durationMs: reply.elapsedTime,
        redactions: call.redactions,
        outputRedactions: call.outputRedactions,
      });
      if (model === null) return;
      const tokens = () => {
        if (call.usedTokens) metrics.recordTokens(model, call.usedTokens - call.completionTokens, call.completionTokens);
      };
      if (call.engineWork) void call.engineWork.then(tokens, tokens);
      else tokens();
    },
  };
}
