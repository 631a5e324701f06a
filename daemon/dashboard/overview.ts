// The overview page: the daemon's health, as /v1/health reports it, and the models listed to clients.
import type { FastifyPluginAsync } from 'fastify';
import type { DashboardContext } from './context.js';
import { signedIn } from './guards.js';

export function overviewApi(ctx: DashboardContext): FastifyPluginAsync {
  const { deps } = ctx;
  return async function overview(api) {
    api.get('/overview', async (request) => {
      signedIn(request);
      return {
        health: deps.health(),
        listed: deps.catalog.listed().map((m) => m.id),
      };
    });
  };
}
