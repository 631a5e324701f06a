// Calls per key and endpoint per minute over the last hours, with errors and rate-limit refusals.
import type { FastifyPluginAsync } from 'fastify';
import type { DashboardContext } from './context.js';
import { manages, projectFor, signedIn } from './guards.js';

export function usageApi(ctx: DashboardContext): FastifyPluginAsync {
  const { keys, usage } = ctx.deps;
  return async function usageRoutes(api) {
    api.get<{ Querystring: { project?: string; hours?: string } }>('/usage', async (request) => {
      const { user } = signedIn(request);
      const project = request.query.project !== undefined ? projectFor(keys, user, request.query.project) : undefined;
      const hours = Math.min(24 * 30, Math.max(1, Number(request.query.hours ?? 24) || 24));
      const list = keys.listKeys(project ? { project } : {}).filter((k) => manages(user, k.project));
      const since = Date.now() - hours * 3600_000;
      return {
        since: new Date(since).toISOString(),
        keys: list.map((k) => ({ id: k.id, name: k.name, project: k.projectName })),
        series: usage.series(new Set(list.map((k) => k.id)), since),
      };
    });
  };
}
