// The dashboard and its chat app, served by the daemon outside /v1: the pages (static.ts) and their JSON API
// (api.ts). The chat app calls /v1 like any client, with a key bound to the user's session.
import type { FastifyInstance } from 'fastify';
import { registerDashboardApi } from './api.js';
import type { DashboardDeps } from './deps.js';
import { PAGE_HEADERS, registerDashboardPages } from './static.js';

export type { DashboardDeps } from './deps.js';
export { LOGIN_LIMITS } from './session.js';

export function registerDashboard(app: FastifyInstance, deps: DashboardDeps, webRoot?: string): void {
  void app.register(async (scope) => {
    scope.addHook('onRequest', async (_request, reply) => {
      reply.headers(PAGE_HEADERS);
    });
    registerDashboardApi(scope, deps);
    registerDashboardPages(scope, webRoot);
  });
}
