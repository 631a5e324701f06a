// The checks the dashboard's resources share: who is calling and whether a change carries the session's CSRF token
// (one onRequest hook for the whole API), the rate limit step, and what an account may touch (its projects and
// their keys; an administrator every project). Each throws an ApiError in OpenAI's shape; none changes anything.
import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { AccountsError, sameToken, type SessionRecord, type UserRecord } from '../accounts/index.js';
import type { Config } from '../config/index.js';
import { ApiError } from '../errors/index.js';
import { KeysError, type KeyRegistry, type KeyView } from '../keys/index.js';
import type { Gcra } from '../limits/index.js';
import { parseCookies } from './cookies.js';
import type { DashboardContext } from './context.js';

/** The caller's session, found by its cookie. */
export interface Signed {
  token: string;
  session: SessionRecord;
  user: UserRecord;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by `identifyCaller` on every dashboard API request: null when no session cookie names a live session. */
    dashboard?: Signed | null;
  }
}

/** Host names a browser uses for the device posture's loopback address; any other name is DNS rebinding. */
const LOOPBACK_HOST = /^(127\.0\.0\.1|\[::1\]|localhost)(:\d+)?$/i;

/**
 * Who is calling, and whether a change carries the right CSRF token: the session's, or before sign-in the CSRF
 * cookie's. MUST run before every route of the API.
 */
export function identifyCaller({ deps, secure, cookies: names }: DashboardContext): onRequestAsyncHookHandler {
  return async function identify(request, reply) {
    reply.header('cache-control', 'no-store');
    // On plain HTTP (loopback only), a page that rebinds its own domain name to 127.0.0.1 could reach this API;
    // its requests name its domain in Host.
    if (!secure && !LOOPBACK_HOST.test(request.headers.host ?? '')) {
      throw new ApiError('permission_denied', 'The dashboard answers only at 127.0.0.1, [::1] or localhost on this posture.');
    }
    const cookies = parseCookies(request.headers.cookie);
    const token = cookies.get(names.session);
    const found = await deps.accounts.freshSession(token);
    request.dashboard = found && token ? { token, ...found } : null;
    if (request.method === 'GET' || request.method === 'HEAD') return;
    const presented = request.headers['x-csrf-token'];
    const expected = request.dashboard ? request.dashboard.session.csrf : cookies.get(names.csrf);
    if (typeof presented !== 'string' || !sameToken(presented, expected)) {
      throw new ApiError(
        'csrf_token_invalid',
        'This change was refused: it did not carry the CSRF token of your session. Reload the dashboard and try again.',
      );
    }
  };
}

export function signedIn(request: FastifyRequest): Signed {
  if (!request.dashboard) throw new ApiError('not_signed_in', 'Sign in to the dashboard first (your session may have expired).');
  return request.dashboard;
}

/** Takes one attempt from `bucket` (at most `perMinute`), or refuses with 429 and when to retry. */
export function admit(limiter: Gcra, bucket: string, perMinute: number, what: string): void {
  const decision = limiter.consume(bucket, perMinute, 1);
  if (decision.allowed) return;
  const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
  throw new ApiError('rate_limit_exceeded', `${what} Wait ${seconds} seconds and try again.`, {
    headers: { 'retry-after': String(seconds) },
  });
}

export function manages(user: UserRecord, projectId: string): boolean {
  return user.role === 'admin' || user.projects.includes(projectId);
}

/** The project `ref` (id or name) names, if this account manages it; otherwise not_found, as if it did not exist. */
export function projectFor(keys: KeyRegistry, user: UserRecord, ref: unknown): string {
  const project = typeof ref === 'string' && ref.length <= 80 ? keys.findProject(ref) : undefined;
  if (!project || !manages(user, project.id))
    throw new ApiError('not_found', `No project '${String(ref)}' in your account.`, { param: 'project' });
  return project.id;
}

/** The key `id`, if it is in a project this account manages; otherwise not_found, as if it did not exist. */
export function keyFor(keys: KeyRegistry, user: UserRecord, id: string): KeyView {
  let key: KeyView;
  try {
    key = keys.getKey(id);
  } catch {
    throw new ApiError('not_found', `No key '${id}' in your projects.`);
  }
  if (!manages(user, key.project)) throw new ApiError('not_found', `No key '${id}' in your projects.`);
  return key;
}

/** The most active keys a project of this account may have: members are capped, administrators are not. */
export function keyCap(config: Config, user: UserRecord): { maxActive?: number } {
  return user.role === 'admin' ? {} : { maxActive: config.limits.maxKeysPerProject };
}

export function adminOnly(user: UserRecord, why = 'The whole log holds every project’s calls: only an administrator can export it.'): void {
  if (user.role !== 'admin') throw new ApiError('permission_denied', why);
}

const CODES = { conflict: 'conflict', not_found: 'not_found', invalid: 'invalid_request_error', cap: 'permission_denied' } as const;

/** An accounts or keys refusal as the API's error (its message capitalised); anything else is rethrown as it is. */
export function fromAccounts(err: unknown): never {
  if (err instanceof AccountsError || err instanceof KeysError) {
    throw new ApiError(CODES[err.kind], err.message.charAt(0).toUpperCase() + err.message.slice(1));
  }
  throw err;
}
