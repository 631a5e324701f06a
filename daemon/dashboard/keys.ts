// API keys of the projects this account manages: list (with when each was last used), create, rotate, revoke, and
// set a key's own rate limits. Every change is checked against the audit log first and logged before the answer.
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { UserRecord } from '../accounts/index.js';
import type { Config } from '../config/index.js';
import { ApiError } from '../errors/index.js';
import { keyCreatedFields, type KeyView } from '../keys/index.js';
import { planLimits } from '../limits/index.js';
import { asUser, type DashboardContext } from './context.js';
import { fromAccounts, keyCap, keyFor, manages, projectFor, signedIn } from './guards.js';
import type { KeyRow } from './wire.js';

const limitSchema = { anyOf: [{ type: 'integer', minimum: 1 }, { type: 'null' }] };

export function keysApi(ctx: DashboardContext): FastifyPluginAsync {
  const { keys, usage } = ctx.deps;
  return async function keysRoutes(api) {
    api.get<{ Querystring: { project?: string } }>('/keys', async (request) => {
      const { user } = signedIn(request);
      const project = request.query.project !== undefined ? projectFor(keys, user, request.query.project) : undefined;
      const list = keys.listKeys(project ? { project } : {}).filter((k) => manages(user, k.project));
      return { data: list.map((k): KeyRow => ({ ...k, lastUsedAt: usage.lastUsed(k.id) })) };
    });
    createRoute(api, ctx);
    rotateRoute(api, ctx);
    api.post<{ Params: { id: string } }>('/keys/:id/revoke', async (request) => {
      const { user } = signedIn(request);
      keyFor(keys, user, request.params.id);
      ctx.trail.writable();
      let revoked: KeyView;
      try {
        revoked = await keys.revokeKey(request.params.id);
      } catch (err) {
        fromAccounts(err);
      }
      request.log.info({ key: revoked.id, user: user.id }, 'key revoked in the dashboard');
      await ctx.trail.record(asUser(user), 'key.revoked', { key: revoked.id, project: revoked.project });
      return revoked;
    });
    limitsRoute(api, ctx);
  };
}

function createRoute(api: FastifyInstance, ctx: DashboardContext): void {
  const { config, keys } = ctx.deps;
  api.post<{ Body: { project: string; name?: string; rpm?: number | null; tpm?: number | null } }>(
    '/keys',
    {
      schema: {
        body: {
          type: 'object',
          required: ['project'],
          additionalProperties: false,
          properties: { project: { type: 'string' }, name: { type: 'string', maxLength: 100 }, rpm: limitSchema, tpm: limitSchema },
        },
      },
    },
    async (request, reply) => {
      const { user } = signedIn(request);
      const project = projectFor(keys, user, request.body.project);
      const { name, rpm, tpm } = request.body;
      checkLimits(config, user, rpm, tpm, null);
      ctx.trail.writable();
      let created: { key: KeyView; secret: string };
      try {
        created = await keys.createKey({
          project,
          ...(name ? { name } : {}),
          ...(rpm ? { rpm } : {}),
          ...(tpm ? { tpm } : {}),
          ...keyCap(config, user),
        });
      } catch (err) {
        fromAccounts(err);
      }
      request.log.info({ key: created.key.id, user: user.id }, 'key created in the dashboard');
      await ctx.trail.record(asUser(user), 'key.created', keyCreatedFields(created.key));
      return reply.code(201).send(created);
    },
  );
}

function rotateRoute(api: FastifyInstance, ctx: DashboardContext): void {
  const { keys } = ctx.deps;
  api.post<{ Params: { id: string }; Body: { graceSeconds?: number } }>(
    '/keys/:id/rotate',
    {
      schema: {
        body: {
          type: 'object',
          additionalProperties: false,
          properties: { graceSeconds: { type: 'integer', minimum: 0, maximum: 7 * 24 * 3600 } },
        },
      },
    },
    async (request) => {
      const { user } = signedIn(request);
      keyFor(keys, user, request.params.id);
      ctx.trail.writable();
      const grace = request.body?.graceSeconds ?? 0;
      let rotated: { key: KeyView; secret: string };
      try {
        rotated = await keys.rotateKey(request.params.id, grace);
      } catch (err) {
        fromAccounts(err);
      }
      request.log.info({ key: rotated.key.id, user: user.id }, 'key rotated in the dashboard');
      await ctx.trail.record(asUser(user), 'key.rotated', { key: rotated.key.id, project: rotated.key.project, grace_seconds: grace });
      return rotated;
    },
  );
}

function limitsRoute(api: FastifyInstance, ctx: DashboardContext): void {
  const { config, keys } = ctx.deps;
  api.post<{ Params: { id: string }; Body: { rpm: number | null; tpm: number | null } }>(
    '/keys/:id/limits',
    {
      schema: {
        body: {
          type: 'object',
          required: ['rpm', 'tpm'],
          additionalProperties: false,
          properties: { rpm: limitSchema, tpm: limitSchema },
        },
      },
    },
    async (request) => {
      const { user } = signedIn(request);
      const key = keyFor(keys, user, request.params.id);
      checkLimits(config, user, request.body.rpm, request.body.tpm, key.plan);
      ctx.trail.writable();
      let changed: KeyView;
      try {
        changed = await keys.setLimits(request.params.id, { rpm: request.body.rpm, tpm: request.body.tpm });
      } catch (err) {
        fromAccounts(err);
      }
      await ctx.trail.record(asUser(user), 'key.limits', { key: changed.id, project: changed.project, rpm: changed.rpm, tpm: changed.tpm });
      return changed;
    },
  );
}

/** A key's own limits: an administrator sets any; an account may only set them at or below its plan's. */
function checkLimits(
  config: Config,
  user: UserRecord,
  rpm: number | null | undefined,
  tpm: number | null | undefined,
  plan: string | null,
): void {
  if (user.role === 'admin') return;
  const ceiling = planLimits(config, plan);
  const of = ceiling.plan ? `the ${ceiling.plan} plan's limit` : "this deployment's default";
  for (const [name, value, most] of [
    ['rpm', rpm, ceiling.rpm],
    ['tpm', tpm, ceiling.tpm],
  ] as const) {
    if (typeof value === 'number' && value > most) {
      throw new ApiError('invalid_request_error', `${name} may be at most ${most} (${of}); ask the operator for more.`, {
        param: name,
      });
    }
  }
}
