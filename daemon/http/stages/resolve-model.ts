// Resolve model, on routes that declare a capability: the body's `model` must be served here with that capability
// (404 model_not_found) and ready (503 model_not_ready).
import type { ModelCatalog } from '../../models/index.js';
import type { RequestStage } from '../stage.js';

export function resolveModelStage(catalog: ModelCatalog): RequestStage {
  return {
    name: 'resolve model',
    hook: 'preHandler',
    run(request) {
      const capability = request.routeOptions.config.declaration?.capability;
      if (!capability) return;
      request.call.model = catalog.resolve((request.body as { model?: unknown } | undefined)?.model, capability);
    },
  };
}
