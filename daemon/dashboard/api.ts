// The dashboard's JSON API, under /dashboard/api: sign-up and sign-in, projects and keys, the chat app's key, the
// scrubbing preview, health and models. A session cookie authenticates; every change also presents the session's
// CSRF token in `x-csrf-token` (before sign-in: the CSRF cookie's value). Errors keep OpenAI's shape.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  Accounts,
  AccountsError,
  SESSION_HOURS,
  projectCap,
  sameToken,
  view,
  type SessionRecord,
  type UserRecord,
} from '../accounts/index.js';
import { ENTRY_KINDS, isEntryKind, type AuditService, type EntryFields, type EntryKind } from '../audit/index.js';
import { Tally } from '../audit/tally.js';
import { exportAnchors } from '../audit/export.js';
import { describeLog, findByRequestId, receiptOf } from '../audit/receipts.js';
import { entriesOfKind } from '../audit/kinds.js';
import { isSovereign, usesTls, type Config } from '../config/index.js';
import { ApiError } from '../errors/index.js';
import { healthReport, type HealthSources } from '../health/index.js';
import { keyCreatedFields, KeysError, type KeyView } from '../keys/index.js';
import { Gcra, planLimits } from '../limits/index.js';
import { OFFLOAD_FROM, SCRUB_BODY, ScrubSession, scrubOffLoop } from '../scrub/index.js';
import type { PipelineDeps } from '../http/pipeline.js';
import type { Store } from '../store/index.js';
import { cookieNames, parseCookies, serializeCookie } from './cookies.js';

export type DashboardDeps = PipelineDeps & Required<HealthSources> & { accounts: Accounts; store: Store };

/** The offline verifier, shipped beside dist/ (tools/verify-anchors.mjs). */
const VERIFIER = join(import.meta.dirname, '..', '..', 'tools', 'verify-anchors.mjs');

/** Sign-in attempts allowed per minute, per client address and per account. */
export const LOGIN_LIMITS = { perAddress: 20, perAccount: 5 };
/** Audit lookups by request id per minute and account (each is one index read; the limit keeps ids from being probed). */
const LOOKUPS_PER_MINUTE = 10;
const SWEEP_MS = 10 * 60_000;
/** Refused sign-ins of an account after its first are logged as one count per window (and at stop). */
export const SIGNIN_WINDOW_MS = 5 * 60_000;
/** Entries the audit page's kind filter reads back over, newest first, per page. */
const ENTRIES_WITHIN = 1_000_000;
/** Host names a browser uses for the device posture's loopback address; any other name is DNS rebinding. */
const LOOPBACK_HOST = /^(127\.0\.0\.1|\[::1\]|localhost)(:\d+)?$/i;

interface Signed {
  token: string;
  session: SessionRecord;
  user: UserRecord;
}

declare module 'fastify' {
  interface FastifyRequest {
    dashboard?: Signed | null;
  }
}

const selfServe = (config: Config) => config.posture === 'cloud' || config.posture === 'frontier';

/** Takes one attempt from `bucket` (at most `perMinute`), or refuses with 429 and when to retry. */
function admit(limiter: Gcra, bucket: string, perMinute: number, what: string): void {
  const decision = limiter.consume(bucket, perMinute, 1);
  if (decision.allowed) return;
  const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
  throw new ApiError('rate_limit_exceeded', `${what} Wait ${seconds} seconds and try again.`, {
    headers: { 'retry-after': String(seconds) },
  });
}

const CODES = { conflict: 'conflict', not_found: 'not_found', invalid: 'invalid_request_error', cap: 'permission_denied' } as const;

function fromAccounts(err: unknown): never {
  if (err instanceof AccountsError || err instanceof KeysError) {
    throw new ApiError(CODES[err.kind], err.message.charAt(0).toUpperCase() + err.message.slice(1));
  }
  throw err;
}

export function registerDashboardApi(app: FastifyInstance, deps: DashboardDeps): void {
  const { accounts, keys, config } = deps;
  const logins = new Gcra();

  // Plain HTTP is served on loopback only (the device posture), where a Secure cookie would never come back.
  const secure = usesTls(config.posture);
  const names = cookieNames(secure);
  const cookie = (name: string, value: string, maxAge: number, httpOnly: boolean) =>
    serializeCookie(name, value, { secure, httpOnly, maxAge });
  const lookups = new Gcra();

  // Who did what, logged before the answer (as a call's entry is); a log that takes no entry refuses the change.
  function auditWritable(): void {
    const stopped = deps.audit?.log.stoppedBy;
    if (stopped) {
      throw new ApiError('audit_unavailable', 'The audit log cannot record changes now (see /v1/health); nothing was changed.', {
        headers: { 'retry-after': '5' },
      });
    }
  }
  async function audited(by: EntryFields['by'], kind: EntryKind, fields: EntryFields): Promise<void> {
    if (!deps.audit) return;
    try {
      await deps.audit.append(kind, { by, ...fields });
    } catch (err) {
      app.log.error({ kind, err: (err as Error).message }, 'an administrative action could not be logged');
      throw new ApiError('audit_unavailable', 'The change was made, but the audit log could not record it; see /v1/health.', {
        headers: { 'retry-after': '5' },
      });
    }
  }
  const asUser = (user: UserRecord) => ({ account: user.id });
  const signins = new Tally({
    append: (fields) => deps.audit?.append('signin.refused', fields).catch(() => {}) ?? Promise.resolve(),
    windowMs: SIGNIN_WINDOW_MS,
    forgetIdle: true,
  });
  /** A refused sign-in, counted per account (its public id; an unknown email is counted as `null`, never named). */
  function refusedSignIn(email: string, reason: 'password' | 'rate_limited'): void {
    const account = accounts.findByEmail(email)?.id ?? null;
    signins.note(`${account ?? ''}:${reason}`, { account, reason });
  }
  app.addHook('onClose', async () => {
    await signins.close();
  });

  // Expired sessions go, and with them their chat keys.
  const sweep = () => {
    try {
      for (const session of accounts.sweepSessions()) void endChatKey(session, 'daemon');
    } catch (err) {
      app.log.error({ err: (err as Error).message }, 'expired dashboard sessions could not be removed; retrying later');
    }
  };
  const sweeper = setInterval(sweep, SWEEP_MS);
  sweeper.unref();
  app.addHook('onReady', async () => sweep());
  app.addHook('onClose', async () => clearInterval(sweeper));

  function signedIn(request: FastifyRequest): Signed {
    if (!request.dashboard) throw new ApiError('not_signed_in', 'Sign in to the dashboard first (your session may have expired).');
    return request.dashboard;
  }

  function manages(user: UserRecord, projectId: string): boolean {
    return user.role === 'admin' || user.projects.includes(projectId);
  }

  function projectFor(user: UserRecord, ref: unknown): string {
    const project = typeof ref === 'string' && ref.length <= 80 ? keys.findProject(ref) : undefined;
    if (!project || !manages(user, project.id))
      throw new ApiError('not_found', `No project '${String(ref)}' in your account.`, { param: 'project' });
    return project.id;
  }

  /** The most active keys a project of this account may have: members are capped, administrators are not. */
  function keyCap(user: UserRecord): { maxActive?: number } {
    return user.role === 'admin' ? {} : { maxActive: config.limits.maxKeysPerProject };
  }

  function keyFor(user: UserRecord, id: string): KeyView {
    let key: KeyView;
    try {
      key = keys.getKey(id);
    } catch {
      throw new ApiError('not_found', `No key '${id}' in your projects.`);
    }
    if (!manages(user, key.project)) throw new ApiError('not_found', `No key '${id}' in your projects.`);
    return key;
  }

  /** Ends the session the browser had, if any (with its chat key), and starts a new one. */
  async function beginSession(request: FastifyRequest, reply: FastifyReply, userId: string): Promise<void> {
    if (request.dashboard) await endChatKey(accounts.endSession(request.dashboard.token), asUser(request.dashboard.user));
    const started = await accounts.startSession(userId);
    const maxAge = SESSION_HOURS * 3600;
    reply.header('set-cookie', [
      cookie(names.session, started.token, maxAge, true),
      cookie(names.csrf, started.session.csrf, maxAge, false),
    ]);
  }

  /** A key's own limits: an administrator sets any; an account may only set them at or below its plan's. */
  function checkLimits(user: UserRecord, rpm: number | null | undefined, tpm: number | null | undefined, plan: string | null): void {
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

  /** Revokes a session's chat key: at sign-out (by its account) or when the session expired (by the daemon). */
  async function endChatKey(session: SessionRecord | undefined, by: EntryFields['by']): Promise<void> {
    if (!session?.chatKeyId) return;
    let revoked: KeyView;
    try {
      revoked = keys.revokeKey(session.chatKeyId);
    } catch {
      return; // Already gone.
    }
    await audited(by, 'key.revoked', { key: revoked.id, project: revoked.project, chat_app: true }).catch(() => {});
  }

  void app.register(
    async (api) => {
      // Who is calling, and whether a change carries the right CSRF token.
      api.addHook('onRequest', async (request, reply) => {
        reply.header('cache-control', 'no-store');
        // On plain HTTP (loopback only), a page that rebinds its own domain name to 127.0.0.1 could reach this API;
        // its requests name its domain in Host.
        if (!secure && !LOOPBACK_HOST.test(request.headers.host ?? '')) {
          throw new ApiError('permission_denied', 'The dashboard answers only at 127.0.0.1, [::1] or localhost on this posture.');
        }
        const cookies = parseCookies(request.headers.cookie);
        const token = cookies.get(names.session);
        const found = accounts.session(token);
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
      });

      api.get('/session', async (request, reply) => {
        const signed = request.dashboard;
        let csrf = signed?.session.csrf ?? parseCookies(request.headers.cookie).get(names.csrf);
        if (!csrf || !/^[A-Za-z0-9_-]{43}$/.test(csrf)) {
          csrf = randomBytes(32).toString('base64url');
          reply.header('set-cookie', cookie(names.csrf, csrf, SESSION_HOURS * 3600, false));
        }
        return {
          user: signed ? view(signed.user) : null,
          csrf,
          posture: config.posture,
          region: config.region,
          sovereign: isSovereign(config.posture),
          signup: selfServe(config),
        };
      });

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
          admit(logins, `signup:${request.ip}`, LOGIN_LIMITS.perAddress, 'Too many sign-ups from your address.');
          auditWritable();
          const { email, password, project } = request.body;
          if (accounts.findByEmail(email)) throw new ApiError('conflict', 'An account for this email already exists. Sign in instead.');
          let projectId: string;
          try {
            projectId = keys.createProject(project).id;
          } catch (err) {
            fromAccounts(err);
          }
          let user: UserRecord;
          try {
            user = await accounts.createUser({ email, password, role: 'member', projects: [projectId] });
          } catch (err) {
            keys.removeProject(projectId);
            fromAccounts(err);
          }
          const owned = keys.setProjectOwner(projectId, user.id);
          await audited(asUser(user), 'account.created', { account: user.id, role: user.role, projects: user.projects });
          await audited(asUser(user), 'project.created', { project: owned.id, name: owned.name });
          await beginSession(request, reply, user.id);
          request.log.info({ user: user.id, project: projectId }, 'dashboard account created');
          return reply.code(201).send({ user: view(user) });
        },
      );

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
            admit(logins, `ip:${request.ip}`, LOGIN_LIMITS.perAddress, 'Too many sign-in attempts.');
            admit(logins, `email:${email}`, LOGIN_LIMITS.perAccount, 'Too many sign-in attempts.');
          } catch (err) {
            refusedSignIn(email, 'rate_limited');
            throw err;
          }
          const user = await accounts.checkPassword(email, request.body.password);
          if (!user) {
            refusedSignIn(email, 'password');
            request.log.info('dashboard sign-in refused');
            throw new ApiError('invalid_credentials', 'The email or the password is wrong.');
          }
          await beginSession(request, reply, user.id);
          request.log.info({ user: user.id }, 'dashboard sign-in');
          return { user: view(user) };
        },
      );

      api.post('/logout', async (request, reply) => {
        const signed = signedIn(request);
        await endChatKey(accounts.endSession(signed.token), asUser(signed.user));
        reply.header('set-cookie', [cookie(names.session, '', 0, true), cookie(names.csrf, '', 0, false)]);
        return { signedOut: true };
      });

      api.get('/projects', async (request) => {
        const { user } = signedIn(request);
        return { data: keys.listProjects().filter((p) => manages(user, p.id)) };
      });

      api.post<{ Body: { name: string } }>(
        '/projects',
        {
          schema: {
            body: {
              type: 'object',
              required: ['name'],
              additionalProperties: false,
              properties: { name: { type: 'string', maxLength: 64 } },
            },
          },
        },
        async (request, reply) => {
          const { user } = signedIn(request);
          const max = config.limits.maxProjectsPerAccount;
          if (user.role !== 'admin' && user.projects.length >= max) fromAccounts(projectCap(max));
          auditWritable();
          let created;
          try {
            // A member's projects share the account's in-flight places; an administrator's are not the account's.
            const project = keys.createProject(request.body.name, user.role === 'admin' ? undefined : user.id);
            if (user.role !== 'admin') {
              try {
                accounts.addProject(user.id, project.id, max);
              } catch (err) {
                // Another project of the account was made meanwhile and reached the cap: this one must not stay.
                keys.removeProject(project.id);
                throw err;
              }
            }
            created = project;
          } catch (err) {
            fromAccounts(err);
          }
          await audited(asUser(user), 'project.created', { project: created.id, name: created.name });
          return reply.code(201).send(created);
        },
      );

      api.get<{ Querystring: { project?: string } }>('/keys', async (request) => {
        const { user } = signedIn(request);
        const project = request.query.project !== undefined ? projectFor(user, request.query.project) : undefined;
        const list = keys.listKeys(project ? { project } : {}).filter((k) => manages(user, k.project));
        return { data: list.map((k) => ({ ...k, lastUsedAt: deps.usage?.lastUsed(k.id) ?? null })) };
      });

      const limitSchema = { anyOf: [{ type: 'integer', minimum: 1 }, { type: 'null' }] };
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
          const project = projectFor(user, request.body.project);
          const { name, rpm, tpm } = request.body;
          checkLimits(user, rpm, tpm, null);
          auditWritable();
          let created: { key: KeyView; secret: string };
          try {
            created = keys.createKey({
              project,
              ...(name ? { name } : {}),
              ...(rpm ? { rpm } : {}),
              ...(tpm ? { tpm } : {}),
              ...keyCap(user),
            });
          } catch (err) {
            fromAccounts(err);
          }
          request.log.info({ key: created.key.id, user: user.id }, 'key created in the dashboard');
          await audited(asUser(user), 'key.created', keyCreatedFields(created.key));
          return reply.code(201).send(created);
        },
      );

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
          keyFor(user, request.params.id);
          auditWritable();
          const grace = request.body?.graceSeconds ?? 0;
          let rotated: { key: KeyView; secret: string };
          try {
            rotated = keys.rotateKey(request.params.id, grace);
          } catch (err) {
            fromAccounts(err);
          }
          request.log.info({ key: rotated.key.id, user: user.id }, 'key rotated in the dashboard');
          await audited(asUser(user), 'key.rotated', { key: rotated.key.id, project: rotated.key.project, grace_seconds: grace });
          return rotated;
        },
      );

      api.post<{ Params: { id: string } }>('/keys/:id/revoke', async (request) => {
        const { user } = signedIn(request);
        keyFor(user, request.params.id);
        auditWritable();
        let revoked: KeyView;
        try {
          revoked = keys.revokeKey(request.params.id);
        } catch (err) {
          fromAccounts(err);
        }
        request.log.info({ key: revoked.id, user: user.id }, 'key revoked in the dashboard');
        await audited(asUser(user), 'key.revoked', { key: revoked.id, project: revoked.project });
        return revoked;
      });

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
          const key = keyFor(user, request.params.id);
          checkLimits(user, request.body.rpm, request.body.tpm, key.plan);
          auditWritable();
          let changed: KeyView;
          try {
            changed = keys.setLimits(request.params.id, { rpm: request.body.rpm, tpm: request.body.tpm });
          } catch (err) {
            fromAccounts(err);
          }
          await audited(asUser(user), 'key.limits', { key: changed.id, project: changed.project, rpm: changed.rpm, tpm: changed.tpm });
          return changed;
        },
      );

      // Calls per key and endpoint per minute over the last hours, with errors and rate-limit refusals.
      api.get<{ Querystring: { project?: string; hours?: string } }>('/usage', async (request) => {
        const { user } = signedIn(request);
        const project = request.query.project !== undefined ? projectFor(user, request.query.project) : undefined;
        const hours = Math.min(24 * 30, Math.max(1, Number(request.query.hours ?? 24) || 24));
        const list = keys.listKeys(project ? { project } : {}).filter((k) => manages(user, k.project));
        const since = Date.now() - hours * 3600_000;
        return {
          since: new Date(since).toISOString(),
          keys: list.map((k) => ({ id: k.id, name: k.name, project: k.projectName })),
          series: deps.usage?.series(new Set(list.map((k) => k.id)), since) ?? [],
        };
      });

      function auditOf(): AuditService {
        if (!deps.audit) throw new ApiError('audit_unavailable', 'This server keeps no audit log.');
        return deps.audit;
      }
      function adminOnly(user: UserRecord): void {
        if (user.role !== 'admin') {
          throw new ApiError('permission_denied', 'The whole log holds every project’s calls: only an administrator can export it.');
        }
      }

      // The log's signer and newest checkpoints.
      api.get('/audit', async (request) => {
        const { user } = signedIn(request);
        const audit = auditOf();
        return {
          ...describeLog(audit),
          checkpoints: (audit.checkpoints?.list(10) ?? []).map(({ seq, size, time, signer, key_id }) => ({
            seq,
            size,
            time,
            signer,
            key_id,
          })),
          canExport: user.role === 'admin',
        };
      });

      // The export `sovereign audit export` writes, for the page's verifier and for download (administrators).
      api.get('/audit/anchors.json', async (request, reply) => {
        adminOnly(signedIn(request).user);
        if (!deps.store) throw new ApiError('audit_unavailable', 'This server keeps no audit log.');
        reply.header('content-disposition', 'attachment; filename="anchors.json"');
        return exportAnchors(deps.store, auditOf().log, auditOf().originName).anchors;
      });

      api.get<{ Querystring: { size?: string } }>('/audit/entries.jsonl', async (request, reply) => {
        adminOnly(signedIn(request).user);
        const log = auditOf().log;
        const asked = Number(request.query.size ?? log.size);
        if (!Number.isSafeInteger(asked) || asked < 0 || asked > log.size) {
          throw new ApiError('invalid_request_error', `size must be a whole number from 0 to ${log.size}.`, { param: 'size' });
        }
        reply.header('content-disposition', 'attachment; filename="entries.jsonl"').type('application/x-ndjson; charset=utf-8');
        return reply.send(
          Readable.from(
            (function* () {
              for (let i = 0; i < asked; i++) yield `${log.entry(i)!.toString('utf8')}\n`;
            })(),
          ),
        );
      });

      // The newest entries, of one kind or all (administrators: the log holds every project's calls and every
      // administrative action). Searches back over at most ENTRIES_WITHIN entries from `before`.
      api.get<{ Querystring: { kind?: string; before?: string; limit?: string } }>('/audit/entries', async (request) => {
        adminOnly(signedIn(request).user);
        const log = auditOf().log;
        const { kind } = request.query;
        if (kind !== undefined && kind !== '' && !isEntryKind(kind)) {
          throw new ApiError('invalid_request_error', `No entry kind '${kind}'; the kinds are ${Object.keys(ENTRY_KINDS).join(', ')}.`, {
            param: 'kind',
          });
        }
        const limit = Number(request.query.limit ?? 50);
        const before = Number(request.query.before ?? log.readable);
        if (!Number.isSafeInteger(limit) || limit < 1 || limit > 200) {
          throw new ApiError('invalid_request_error', 'limit must be a whole number from 1 to 200.', { param: 'limit' });
        }
        if (!Number.isSafeInteger(before) || before < 0) {
          throw new ApiError('invalid_request_error', 'before must be a leaf index.', { param: 'before' });
        }
        const found = await entriesOfKind(auditOf(), kind || null, Math.min(before, log.readable), limit, ENTRIES_WITHIN);
        return { kinds: Object.keys(ENTRY_KINDS), ...found };
      });

      // One call's receipt, found by its X-Request-Id; only for calls of the projects this account manages.
      api.get<{ Querystring: { request_id?: string } }>('/audit/lookup', async (request) => {
        const { user } = signedIn(request);
        const id = request.query.request_id?.trim() ?? '';
        if (!/^req_[0-9a-f]{32}$/.test(id)) {
          throw new ApiError('invalid_request_error', 'Give the request id from the X-Request-Id header, such as req_0123…', {
            param: 'request_id',
          });
        }
        admit(lookups, user.id, LOOKUPS_PER_MINUTE, 'Too many lookups.');
        const audit = auditOf();
        const leaf = findByRequestId(audit, id);
        const visible = (entry: { project?: string }) => typeof entry.project === 'string' && manages(user, entry.project);
        if (leaf === null) throw new ApiError('not_found', `No audit entry for ${id} in your projects.`, { param: 'request_id' });
        return receiptOf(audit, leaf, visible, config.audit.checkpointMs);
      });

      // The offline verifier, to copy to an air-gapped machine.
      api.get('/audit/verify-anchors.mjs', async (request, reply) => {
        signedIn(request);
        return reply
          .type('text/javascript; charset=utf-8')
          .header('content-disposition', 'attachment; filename="verify-anchors.mjs"')
          .send(readFileSync(VERIFIER));
      });

      // The chat app's key: bound to this session, revoked when it ends. Asking again replaces its secret (only the
      // page that asked holds it, in memory).
      api.post<{ Body: { project?: string } }>(
        '/chat-key',
        { schema: { body: { type: 'object', additionalProperties: false, properties: { project: { type: 'string', maxLength: 80 } } } } },
        async (request) => {
          const signed = signedIn(request);
          const { user, session } = signed;
          // An administrator manages every tenant's projects: the chat app must be told which one to bill, never guess.
          const asked = request.body?.project ?? user.projects[0];
          if (!asked) {
            throw new ApiError(
              'invalid_request_error',
              user.role === 'admin'
                ? 'Choose the project the chat app calls the API for.'
                : 'Create a project first: the chat app calls the API with a key of one of your projects.',
              { param: 'project' },
            );
          }
          const project = projectFor(user, asked);
          auditWritable();
          if (session.chatKeyId) {
            let current: KeyView | null = null;
            try {
              current = keys.getKey(session.chatKeyId);
            } catch {
              // Already removed: a new one below.
            }
            if (current?.status === 'active' && current.project === project) {
              const rotated = keys.rotateKey(current.id);
              await audited(asUser(user), 'key.rotated', { key: current.id, project, grace_seconds: 0, chat_app: true });
              return { secret: rotated.secret };
            }
            if (current?.status === 'active') {
              keys.revokeKey(current.id);
              await audited(asUser(user), 'key.revoked', { key: current.id, project: current.project, chat_app: true });
            }
          }
          // The chat app's keys count among the project's: sessions are many, and each would bring one more.
          let created: { key: KeyView; secret: string };
          try {
            created = keys.createKey({ project, name: `chat app (${user.email})`, ...keyCap(user) });
          } catch (err) {
            fromAccounts(err);
          }
          await audited(asUser(user), 'key.created', keyCreatedFields(created.key, { chat_app: true }));
          if (!accounts.setChatKey(signed.token, created.key.id)) {
            // The session ended while the key was made: it must not outlive it.
            keys.revokeKey(created.key.id);
            await audited(asUser(user), 'key.revoked', { key: created.key.id, project, chat_app: true });
            throw new ApiError('not_signed_in', 'Sign in to the dashboard first (your session may have expired).');
          }
          return { secret: created.secret };
        },
      );

      // What the chat app's user sees of scrubbing: their messages as the model receives them.
      api.post<{ Body: { texts: string[] } }>(
        '/scrub',
        {
          schema: {
            body: {
              type: 'object',
              required: ['texts'],
              additionalProperties: false,
              properties: { texts: { type: 'array', maxItems: 256, items: { type: 'string', maxLength: 100_000 } } },
            },
          },
        },
        async (request) => {
          signedIn(request);
          // As a /v1 call's body would be: a large one off the event loop (daemon/scrub/offload.ts).
          if (request.call.bodyBytes >= OFFLOAD_FROM) {
            const { body, session } = await scrubOffLoop('preview', request.body);
            return { texts: (body as { texts: string[] }).texts, redactions: session.counts() };
          }
          const session = new ScrubSession();
          SCRUB_BODY.preview(request.body, session);
          return { texts: request.body.texts, redactions: session.counts() };
        },
      );

      api.get('/overview', async (request) => {
        signedIn(request);
        return {
          health: healthReport(deps),
          listed: deps.catalog.listed().map((m) => m.id),
        };
      });
    },
    { prefix: '/dashboard/api' },
  );
}
