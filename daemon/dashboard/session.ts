// Sessions: the page's first call (who is signed in, and its CSRF token), self-serve sign-up, sign-in and sign-out.
// A session's chat key ends with it: at sign-out, at the next sign-in in the same browser, or when it expires.
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { SESSION_HOURS, view, type SessionRecord, type UserRecord } from '../accounts/index.js';
import type { EntryFields } from '../audit/index.js';
import { Tally } from '../audit/tally.js';
import { isSovereign, type Config } from '../config/index.js';
import { ApiError } from '../errors/index.js';
import type { KeyView } from '../keys/index.js';
import { Gcra } from '../limits/index.js';
import { asUser, type DashboardContext } from './context.js';
import { parseCookies } from './cookies.js';
import { admit, fromAccounts, signedIn } from './guards.js';

/** Sign-in attempts allowed per minute, per client address and per account. */
export const LOGIN_LIMITS = { perAddress: 20, perAccount: 5 };
/** Refused sign-ins of an account after its first are logged as one count per window (and at stop). */
export const SIGNIN_WINDOW_MS = 5 * 60_000;
const SWEEP_MS = 10 * 60_000;

const selfServe = (config: Config) => config.posture === 'cloud' || config.posture === 'frontier';

/** What the session routes share: starting and ending sessions, and the count of refused sign-ins. */
interface Sessions {
  /** Ends the session the browser had, if any (with its chat key), and starts a new one. */
  begin(request: FastifyRequest, reply: FastifyReply, userId: string): Promise<void>;
  /** Revokes a session's chat key: at sign-out (by its account) or when the session expired (by the daemon). */
  endChatKey(session: SessionRecord | undefined, by: EntryFields['by']): Promise<void>;
  /** A refused sign-in, counted per account (its public id; an unknown email is counted as `null`, never named). */
  refused(email: string, reason: 'password' | 'rate_limited'): void;
  /** Sign-ups and sign-ins, per client address and per account. */
  logins: Gcra;
}

export function sessionApi(ctx: DashboardContext): FastifyPluginAsync {
  return async function session(api) {
    const sessions = keepSessions(api, ctx);
    api.get('/session', async (request, reply) => describeSession(ctx, request, reply));
    signUpRoute(api, ctx, sessions);
    signInRoute(api, ctx, sessions);
    api.post('/logout', async (request, reply) => {
      const signed = signedIn(request);
      await sessions.endChatKey(await ctx.deps.accounts.endSession(signed.token), asUser(signed.user));
      reply.header('set-cookie', [ctx.cookie(ctx.cookies.session, '', 0, true), ctx.cookie(ctx.cookies.csrf, '', 0, false)]);
      return { signedOut: true };
    });
  };
}

function keepSessions(api: FastifyInstance, ctx: DashboardContext): Sessions {
  const { accounts, keys, audit } = ctx.deps;
  const signins = new Tally({
    append: (fields) => audit.append('signin.refused', fields).catch(() => {}),
    windowMs: SIGNIN_WINDOW_MS,
    forgetIdle: true,
  });
  api.addHook('onClose', async () => {
    await signins.close();
  });

  async function endChatKey(session: SessionRecord | undefined, by: EntryFields['by']): Promise<void> {
    if (!session?.chatKeyId) return;
    let revoked: KeyView;
    try {
      revoked = await keys.revokeKey(session.chatKeyId);
    } catch {
      return; // Already gone.
    }
    await ctx.trail.record(by, 'key.revoked', { key: revoked.id, project: revoked.project, chat_app: true }).catch(() => {});
  }

  // Expired sessions go, and with them their chat keys.
  const sweep = async () => {
    try {
      for (const session of await accounts.sweepSessions()) void endChatKey(session, 'daemon');
    } catch (err) {
      api.log.error({ err: (err as Error).message }, 'expired dashboard sessions could not be removed; retrying later');
    }
  };
  const sweeper = setInterval(() => void sweep(), SWEEP_MS);
  sweeper.unref();
  api.addHook('onReady', async () => sweep());
  api.addHook('onClose', async () => clearInterval(sweeper));

  return {
    async begin(request, reply, userId) {
      if (request.dashboard) await endChatKey(await accounts.endSession(request.dashboard.token), asUser(request.dashboard.user));
      const started = await accounts.startSession(userId);
      const maxAge = SESSION_HOURS * 3600;
      reply.header('set-cookie', [
        ctx.cookie(ctx.cookies.session, started.token, maxAge, true),
        ctx.cookie(ctx.cookies.csrf, started.session.csrf, maxAge, false),
      ]);
    },
    endChatKey,
    refused(email, reason) {
      const account = accounts.findByEmail(email)?.id ?? null;
      signins.note(`${account ?? ''}:${reason}`, { account, reason });
    },
    logins: new Gcra(),
  };
}

/** Who is signed in, the CSRF token to present (a new CSRF cookie when the browser has none), and the deployment. */
function describeSession({ deps: { config }, cookies, cookie }: DashboardContext, request: FastifyRequest, reply: FastifyReply) {
  const signed = request.dashboard;
  let csrf = signed?.session.csrf ?? parseCookies(request.headers.cookie).get(cookies.csrf);
  if (!csrf || !/^[A-Za-z0-9_-]{43}$/.test(csrf)) {
    csrf = randomBytes(32).toString('base64url');
    reply.header('set-cookie', cookie(cookies.csrf, csrf, SESSION_HOURS * 3600, false));
  }
  return {
    user: signed ? view(signed.user) : null,
    csrf,
    posture: config.posture,
    region: config.region,
    sovereign: isSovereign(config.posture),
    signup: selfServe(config),
  };
}

/** Self-serve sign-up (cloud and frontier): a member account, its first project, and a session. */
function signUpRoute(api: FastifyInstance, ctx: DashboardContext, sessions: Sessions): void {
  const { config, accounts, keys } = ctx.deps;
  api.post<{ Body: { email: string; password: string; project: string } }>(
    '/signup',
    {
      schema: {
        body: {
          type: 'object',
          required: ['email', 'password', 'project'],
          additionalProperties: false,
          properties: {
            email: { type: 'string', maxLength: 320 },
            password: { type: 'string', maxLength: 1024 },
            project: { type: 'string', maxLength: 64 },
          },
        },
      },
    },
    async (request, reply) => {
      if (!selfServe(config)) {
        throw new ApiError(
          'permission_denied',
          `Self-serve sign-up is only on the cloud and frontier postures. On ${config.posture}, the operator creates accounts with 'sovereign admin create'.`,
        );
      }
      admit(sessions.logins, `signup:${request.ip}`, LOGIN_LIMITS.perAddress, 'Too many sign-ups from your address.');
      ctx.trail.writable();
      const { email, password, project } = request.body;
      if (accounts.findByEmail(email)) throw new ApiError('conflict', 'An account for this email already exists. Sign in instead.');
      let projectId: string;
      try {
        projectId = (await keys.createProject(project)).id;
      } catch (err) {
        fromAccounts(err);
      }
      let user: UserRecord;
      try {
        user = await accounts.createUser({ email, password, role: 'member', projects: [projectId] });
      } catch (err) {
        await keys.removeProject(projectId);
        fromAccounts(err);
      }
      const owned = await keys.setProjectOwner(projectId, user.id);
      await ctx.trail.record(asUser(user), 'account.created', { account: user.id, role: user.role, projects: user.projects });
      await ctx.trail.record(asUser(user), 'project.created', { project: owned.id, name: owned.name });
      await sessions.begin(request, reply, user.id);
      request.log.info({ user: user.id, project: projectId }, 'dashboard account created');
      return reply.code(201).send({ user: view(user) });
    },
  );
}

function signInRoute(api: FastifyInstance, ctx: DashboardContext, sessions: Sessions): void {
  api.post<{ Body: { email: string; password: string } }>(
    '/login',
    {
      schema: {
        body: {
          type: 'object',
          required: ['email', 'password'],
          additionalProperties: false,
          properties: { email: { type: 'string', maxLength: 320 }, password: { type: 'string', maxLength: 1024 } },
        },
      },
    },
    async (request, reply) => {
      const email = request.body.email.trim().toLowerCase();
      try {
        admit(sessions.logins, `ip:${request.ip}`, LOGIN_LIMITS.perAddress, 'Too many sign-in attempts.');
        admit(sessions.logins, `email:${email}`, LOGIN_LIMITS.perAccount, 'Too many sign-in attempts.');
      } catch (err) {
        sessions.refused(email, 'rate_limited');
        throw err;
      }
      const user = await ctx.deps.accounts.checkPassword(email, request.body.password);
      if (!user) {
        sessions.refused(email, 'password');
        request.log.info('dashboard sign-in refused');
        throw new ApiError('invalid_credentials', 'The email or the password is wrong.');
      }
      await sessions.begin(request, reply, user.id);
      request.log.info({ user: user.id }, 'dashboard sign-in');
      return { user: view(user) };
    },
  );
}
