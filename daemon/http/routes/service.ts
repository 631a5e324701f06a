// Routes about the service itself: /healthz and /readyz for supervisors and load balancers, /v1/health and
// /v1/models for clients.
import type { FastifyInstance } from 'fastify';
import { isSovereign } from '../../config/index.js';
import { ApiError } from '../../errors/index.js';
import { healthReport, type HealthSources } from '../../health/index.js';
import { ownedByShown, type ServedModel } from '../../models/index.js';

/** What /v1/health and /v1/models need: every one of health's sources. */
export type ServiceRouteDeps = Required<HealthSources>;

const AUTHENTICATED = { config: { declaration: { auth: true } } };

/**
 * Liveness for supervisors, and readiness for load balancers, outside /v1 and without a key: they say nothing an
 * outsider could use. A replica is not ready while it cannot trust its copy of the shared state (store: postgres):
 * it would refuse every call, so a load balancer should send them to another.
 */
export function registerLivenessRoute(root: FastifyInstance, shared: { staleness(): { problem: string } | null } | null): void {
  // While draining, the identify stage already answers 503: a supervisor sees the process going away.
  root.get('/healthz', async () => ({ status: 'alive' }));
  root.get('/readyz', async (_request, reply) => {
    const stale = shared?.staleness();
    if (!stale) return { status: 'ready' };
    return reply.code(503).header('retry-after', '2').send({ status: 'unavailable', problem: stale.problem });
  });
}

export function registerServiceRoutes(v1: FastifyInstance, deps: ServiceRouteDeps): void {
  const sovereign = isSovereign(deps.config.posture);
  const modelObject = (m: ServedModel) => ({
    id: m.id,
    object: 'model',
    created: m.created,
    owned_by: ownedByShown(m, sovereign),
  });

  // Answered even while the shared rate limiter is down: it is what says so.
  v1.get('/health', { config: { declaration: { auth: true, essential: true } } }, async () => healthReport(deps));

  v1.get('/models', AUTHENTICATED, async () => ({ object: 'list', data: deps.catalog.listed().map(modelObject) }));

  v1.get<{ Params: { id: string } }>('/models/:id', AUTHENTICATED, async (request) => {
    const model = deps.catalog.listed().find((m) => m.id === request.params.id);
    if (!model) {
      throw new ApiError('model_not_found', `The model '${request.params.id}' is not served here. GET /v1/models lists what is.`, {
        param: 'model',
      });
    }
    return modelObject(model);
  });
}
