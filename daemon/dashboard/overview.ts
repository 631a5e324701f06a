// The console's first screen: the daemon's health as /v1/health reports it (alerts included) and the models listed
// to clients, for every account; for administrators also the device's own counters over a period (the charts:
// daemon/metrics) and the first-run checklist (checklist.ts).
import type { FastifyPluginAsync } from 'fastify';
import { ApiError } from '../errors/index.js';
import { checklist, CHECKLIST_MARKS, markChecklist, type ChecklistMark } from './checklist.js';
import { asUser, type DashboardContext } from './context.js';
import { adminOnly, signedIn } from './guards.js';
import type { OverviewView } from './wire.js';

/**
 * The periods the charts offer, in hours, and the buckets each is drawn in: a minute each over an hour, an hour each
 * over a day, three hours over a week, a day each over 30 days (steps of hours are read from the hourly counts).
 */
const PERIODS: Record<string, number> = { 1: 60, 24: 24, 168: 56, 720: 30 };
const ADMINS = 'The device’s counters and its checklist are for its administrators.';

export function overviewApi(ctx: DashboardContext): FastifyPluginAsync {
  const { deps } = ctx;
  return async function overview(api) {
    api.get('/overview', async (request) => {
      const { user } = signedIn(request);
      const admin = user.role === 'admin';
      return {
        health: deps.health(),
        listed: deps.catalog.listed().map((m) => m.id),
        checklist: admin ? checklist(deps) : null,
        checkpointLagSeconds: deps.config.alerts.checkpointLagSeconds,
      } satisfies OverviewView;
    });

    api.get<{ Querystring: { hours?: string } }>('/metrics', async (request) => {
      adminOnly(signedIn(request).user, ADMINS);
      const hours: unknown = request.query.hours ?? '24';
      // Own keys only: '__proto__' or 'constructor' would find the object's prototype and reach series() as NaN hours.
      if (typeof hours !== 'string' || !Object.hasOwn(PERIODS, hours)) {
        throw new ApiError('invalid_request_error', `'hours' must be one of ${Object.keys(PERIODS).join(', ')}.`, {
          param: 'hours',
        });
      }
      const buckets = PERIODS[hours]!;
      return deps.metrics.series(Number(hours), buckets);
    });

    // An administrator's word that a checklist step is done where the daemon cannot see it: the TLS certificate's
    // fingerprint written down, a receipt verified in the browser.
    api.post<{ Body: { item?: unknown; fingerprint?: unknown; leaf?: unknown } }>('/checklist', async (request) => {
      const { user } = signedIn(request);
      adminOnly(user, ADMINS);
      const body = request.body ?? {};
      const item = body.item;
      if (typeof item !== 'string' || !(CHECKLIST_MARKS as readonly string[]).includes(item)) {
        throw new ApiError('invalid_request_error', `'item' must be one of ${CHECKLIST_MARKS.join(', ')}.`, { param: 'item' });
      }
      ctx.trail.writable();
      const mark = await markChecklist(deps, item as ChecklistMark, body);
      await ctx.trail.record(asUser(user), 'operator.checklist', { item, ...mark });
      return { checklist: checklist(deps) };
    });
  };
}
