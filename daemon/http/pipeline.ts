// The request pipeline, in order: the order here is the order a call meets the stages, and docs/architecture.md
// draws the same list with the status each stage may return. The stages of one fastify hook (onRequest, preHandler)
// run inside a single hook. Stages that do nothing on this posture (metering on sealed postures) are left out, so
// those calls skip them entirely.
//
//   1. identify          every response   X-Region, X-Request-Id, X-Sovereign; 503 while draining
//   2. admit             /v1              503 server_overloaded past limits.maxInFlight
//   3. authenticate      /v1              401 invalid_api_key; then the key's, its project's and its account's
//                                         shares of the in-flight places: 429 rate_limit_exceeded past one
//   4. limit requests    /v1, metered     429 rate_limit_exceeded (requests)
//      (fastify: parse body, validate against the route schema: 400, 413, 415)
//   5. resolve model     routes w/ model  404 model_not_found, 503 model_not_ready
//   6. limit tokens      metered          429 rate_limit_exceeded (tokens), reserved before the engine runs
//   7. scrub             routes w/ text   400 for a field that cannot be scrubbed; 500 internal_error if scrubbing
//                                         fails: nothing reaches the engine (large bodies: in a worker thread)
//   8. handler           the engine call
//   9. settle tokens     metered          when the call ends (even abandoned), the reservation becomes real usage
//  10. audit             authenticated    entry on disk before the response leaves (X-Audit-Leaf); 503 audit_unavailable
//                                         if it cannot be written (http/audit.ts)
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { authenticate, type Principal } from '../auth/index.js';
import { isMetered, type Config } from '../config/index.js';
import { ApiError, MESSAGES } from '../errors/index.js';
import { NotCopyable, OFFLOAD_FROM, SCRUB_BODY, ScrubSession, scrubOffLoop, type BodyKind } from '../scrub/index.js';
import type { AuditService } from '../audit/index.js';
import type { DocumentLibrary } from '../documents/index.js';
import type { KeyRegistry } from '../keys/index.js';
import {
  keyLimits,
  LimiterUnavailableError,
  type FullShare,
  type InFlightGate,
  type KeyLimits,
  type KeyQuota,
  type LimitHeaders,
} from '../limits/index.js';
import type { EngineRegistry } from '../engines/index.js';
import type { ModelCatalog } from '../models/index.js';
import type { EgressService } from '../egress/index.js';
import type { BootReport } from '../health/index.js';
import type { Accounts } from '../accounts/index.js';
import type { UsageMeter } from '../usage/index.js';
import type { UpstreamHealth } from '../health/index.js';
import type { ImageFiles } from '../images/index.js';
import type { Store } from '../store/index.js';
import { newCallContext, type RouteDeclaration } from './context.js';
import { onCallEnd } from './lifetime.js';

export interface DaemonState {
  draining: boolean;
  startedAt: number;
}

export interface PipelineDeps {
  config: Config;
  keys: KeyRegistry;
  limits: KeyLimits;
  gate: InFlightGate;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  state: DaemonState;
  /** X-Region and X-Sovereign, fixed for the life of the process. */
  fixedHeaders: Record<string, string>;
  /** The audit trail; absent only in tests of the HTTP layer alone. */
  audit?: AuditService;
  /** Knowledge bases and their documents. */
  documents?: DocumentLibrary;
  /** The sealed postures' egress guard and counters (health's egress object). */
  egress?: EgressService;
  /** Boots of this data dir and how the last run stopped (health's service object). */
  boots?: BootReport;
  /** Dashboard accounts and sessions; the dashboard is served when present. */
  accounts?: Accounts;
  /** Calls per key and endpoint, and when each key was last used (the dashboard's usage). */
  usage?: UsageMeter;
  /** The data dir's store, for the dashboard's audit export. */
  store?: Store;
  /** Generated images kept for `url` answers. */
  images?: ImageFiles;
  /** The configured upstreams' state, for health. */
  upstreams?: { health(): UpstreamHealth[] };
}

type Hook = 'onRequest' | 'preHandler';

export interface Stage {
  name: string;
  hook: Hook;
  /** Returns a promise only when the stage has to wait: stages that do not wait cost no promise. */
  run: (request: FastifyRequest, reply: FastifyReply) => void | Promise<void>;
}

function declarationOf(request: FastifyRequest): RouteDeclaration | undefined {
  return request.routeOptions.config.declaration;
}

/** Stage 1, on every response including 404s and errors: outside /v1 as well. */
export function identifyStage(deps: PipelineDeps): Stage {
  const fixed = Object.entries(deps.fixedHeaders);
  return {
    name: 'identify',
    hook: 'onRequest',
    run(request, reply) {
      request.call = newCallContext();
      for (const [name, value] of fixed) reply.header(name, value);
      reply.header('x-request-id', request.id);
      if (deps.state.draining) {
        reply.header('connection', 'close');
        throw new ApiError('server_overloaded', 'The daemon is shutting down. Retry in a few seconds.', {
          headers: { 'retry-after': '2' },
        });
      }
    },
  };
}

/**
 * Per authenticated key (a principal object: a change to a key or its project makes a new one), its quota, made once:
 * the limits come from the key, its plan, its project and the configuration, none of which changes between calls.
 */
const quotas = new WeakMap<Principal, KeyQuota>();
function quotaOf(request: FastifyRequest, config: Config): KeyQuota {
  const principal = request.call.principal!;
  let quota = quotas.get(principal);
  if (!quota) {
    const { rpm, tpm } = keyLimits(config, principal);
    const project = {
      id: principal.projectId,
      rpm: principal.projectRpm ?? config.limits.defaultProjectRpm,
      tpm: principal.projectTpm ?? config.limits.defaultProjectTpm,
    };
    quota = { keyId: principal.keyId, rpm, tpm, project };
    quotas.set(principal, quota);
  }
  return quota;
}

/**
 * 429 for a key, or a project, that holds its whole share of the in-flight places: its own calls are what fill it
 * (the device still admits other keys), so it is told to slow down, as for its rate limit, and its refusals count
 * as rate-limited in its usage rather than as the device's failures.
 */
function shareFull(full: FullShare, principal: Principal, gate: InFlightGate): ApiError {
  const { perKey, perProject, perAccount } = gate.shares.sizes;
  const holds = {
    key: `Key ${principal.keyId} already has ${perKey} calls in progress, its share`,
    project: `Project ${principal.projectId} already has ${perProject} calls in progress across its keys, its share`,
    account: `Account ${principal.accountId} already has ${perAccount} calls in progress across its projects, its share`,
  }[full];
  const message = `${holds} of the ${gate.capacity} this device serves at once (limits.${full}Share). Wait for one to finish, or spread the work over time.`;
  return new ApiError('rate_limit_exceeded', message, { headers: { 'retry-after': '1' }, type: 'requests' });
}

/** Stages 2 to 8, for the /v1 routes. */
export function v1Stages(deps: PipelineDeps): Stage[] {
  const metered = isMetered(deps.config.posture);
  const stages: Array<Stage | false> = [
    {
      name: 'admit',
      hook: 'onRequest',
      run(request, reply) {
        const place = deps.gate.enter();
        if (!place) throw new ApiError('server_overloaded', MESSAGES.overloaded, { headers: { 'retry-after': '1' } });
        request.call.place = place;
        onCallEnd(request, reply, () => place.release());
      },
    },
    {
      name: 'authenticate',
      hook: 'onRequest',
      run(request) {
        if (declarationOf(request)?.auth === false) return;
        const place = request.call.place!;
        let principal: Principal;
        try {
          principal = authenticate(request.headers.authorization, deps.keys, request.raw.socket);
        } catch (err) {
          // A refused call gives its place back at once, not when its answer has been read: calls without a valid key
          // hold no place while their answers wait behind others on a connection nobody reads.
          place.release();
          throw err;
        }
        request.call.principal = principal;
        // Once the key is known: its share, its project's and its account's, of the places.
        const full = place.share(principal.keyId, principal.projectId, principal.accountId);
        if (full) {
          place.release();
          throw shareFull(full, principal, deps.gate);
        }
      },
    },
    metered && {
      name: 'limit requests',
      hook: 'onRequest',
      run(request, reply) {
        if (!request.call.principal) return;
        const quota = quotaOf(request, deps.config);
        request.call.quota = quota;
        // An essential route (health) is still served when the shared limiter does not answer.
        const tolerate = (err: unknown) => {
          if (!(err instanceof LimiterUnavailableError && declarationOf(request)?.essential)) throw err;
        };
        let headers: LimitHeaders | Promise<LimitHeaders>;
        try {
          headers = deps.limits.admitRequest(quota);
        } catch (err) {
          return tolerate(err);
        }
        if (!(headers instanceof Promise)) {
          reply.headers(headers);
          return;
        }
        return headers.then((h) => void reply.headers(h), tolerate);
      },
    },
    {
      name: 'resolve model',
      hook: 'preHandler',
      run(request) {
        const capability = declarationOf(request)?.capability;
        if (!capability) return;
        request.call.model = deps.catalog.resolve((request.body as { model?: unknown } | undefined)?.model, capability);
      },
    },
    metered && {
      name: 'limit tokens',
      hook: 'preHandler',
      run(request, reply) {
        const estimate = declarationOf(request)?.tokens;
        const quota = request.call.quota;
        if (!estimate || !quota) return;
        const tokens = Math.max(1, Math.ceil(estimate(request.body, request.call.model?.contextTokens)));
        const reserved = (headers: LimitHeaders) => {
          reply.headers(headers);
          request.call.reservedTokens = tokens;
          // Stage 9, settle tokens: when the call ends, finished or abandoned, the reservation becomes what the
          // engine reports it used (an engine reports even for aborted work; a call that never reached one used
          // nothing).
          onCallEnd(request, reply, () => {
            const settle = () => deps.limits.settleTokens(quota, tokens, request.call.usedTokens ?? 0);
            // An abandoned call's engine reports what it used only once it has stopped.
            if (request.call.engineWork) void request.call.engineWork.then(settle, settle);
            else settle();
          });
        };
        const headers = deps.limits.reserveTokens(quota, tokens);
        if (headers instanceof Promise) return headers.then(reserved);
        reserved(headers);
      },
    },
    {
      name: 'scrub',
      hook: 'preHandler',
      run(request) {
        const kind = declarationOf(request)?.scrub;
        if (kind && request.body !== undefined) return scrubRequest(request, kind, request.body);
      },
    },
  ];
  return stages.filter((s): s is Stage => s !== false);
}

/**
 * Stage 7's work, also for a handler whose texts only exist once it has read them (a multipart upload): replaces
 * personal data in every text of `body` an engine will see and records the session and counts on the call. A body
 * of OFFLOAD_FROM bytes or more is scrubbed in a worker thread (the promise resolves once `body` holds the scrubbed
 * texts); a smaller one here and now.
 */
export function scrubRequest(request: FastifyRequest, kind: BodyKind, body: unknown): void | Promise<void> {
  const failed = (err: unknown): never => {
    // A field refused (a name that holds an ID, a schema nested too deep) is the client's to fix.
    if (err instanceof ApiError) throw err;
    // Fail closed: a text that could not be checked must not reach a model.
    request.log.error({ err: (err as Error).message }, 'scrubbing failed');
    throw new ApiError(
      'internal_error',
      'Personal-data scrubbing failed, so nothing was sent to the model. Retry; if it persists, report the X-Request-Id.',
    );
  };
  const done = (session: ScrubSession) => {
    request.call.redactions = session.counts();
    request.call.scrubSession = session;
  };
  const here = () => {
    const session = new ScrubSession();
    try {
      SCRUB_BODY[kind](body, session);
    } catch (err) {
      failed(err);
    }
    done(session);
  };
  if (request.call.bodyBytes < OFFLOAD_FROM) return here();
  return scrubOffLoop(kind, body).then(
    ({ body: scrubbed, session }) => {
      Object.assign(body as object, scrubbed);
      done(session);
    },
    (err: unknown) => (err instanceof NotCopyable ? here() : failed(err)),
  );
}

/**
 * Adds the stages as hooks: the stages of one hook run in order inside a single fastify hook, so a call pays one
 * hook per phase however many stages it has.
 */
export function registerStages(app: FastifyInstance, stages: Stage[]): void {
  for (const hook of ['onRequest', 'preHandler'] as const) {
    const runs = stages.filter((s) => s.hook === hook).map((s) => s.run);
    if (runs.length) app.addHook(hook, stagesHook(runs));
  }
}

function stagesHook(runs: Array<Stage['run']>) {
  return (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void): void => {
    let i = 0;
    const next = (): void => {
      try {
        while (i < runs.length) {
          const waiting = runs[i++]!(request, reply);
          if (waiting) {
            waiting.then(next, (err: unknown) => done(err instanceof Error ? err : new Error(`a pipeline stage failed: ${String(err)}`)));
            return;
          }
        }
      } catch (err) {
        done(err as Error);
        return;
      }
      done();
    };
    next();
  };
}
