// The dashboard's JSON API, under /dashboard/api: one plugin per resource (session, projects, keys, usage, audit,
// chat, overview), behind one hook that finds the caller's session and checks CSRF (guards.ts). A session cookie
// authenticates; every change also presents the session's CSRF token in `x-csrf-token` (before sign-in: the CSRF
// cookie's value). Errors keep OpenAI's shape.
import type { FastifyInstance } from 'fastify';
import { auditApi } from './audit.js';
import { chatApi } from './chat.js';
import { dashboardContext } from './context.js';
import type { DashboardDeps } from './deps.js';
import { identifyCaller } from './guards.js';
import { keysApi } from './keys.js';
import { overviewApi } from './overview.js';
import { projectsApi } from './projects.js';
import { sessionApi } from './session.js';
import { usageApi } from './usage.js';

const RESOURCES = [sessionApi, projectsApi, keysApi, usageApi, auditApi, chatApi, overviewApi];

export function registerDashboardApi(app: FastifyInstance, deps: DashboardDeps): void {
  const ctx = dashboardContext(deps, app.log);
  void app.register(
    async (api) => {
      api.addHook('onRequest', identifyCaller(ctx));
      for (const resource of RESOURCES) void api.register(resource(ctx));
    },
    { prefix: '/dashboard/api' },
  );
}
