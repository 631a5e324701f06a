// Admit and authenticate, on /v1: a place under the in-flight ceiling (limits.maxInFlight), then the key, then the
// key's, its project's and its account's shares of the places. Release place gives the place back when the call ends.
import {
  authenticate,
  INTERNAL_CREDENTIAL_HEADER,
  refusedFromNetwork,
  type InternalCredentials,
  type Principal,
} from '../../auth/index.js';
import { ApiError, MESSAGES } from '../../errors/index.js';
import type { KeyRegistry } from '../../keys/index.js';
import type { FullShare, InFlightGate } from '../../limits/index.js';
import type { FastifyRequest } from 'fastify';
import { isInProcess } from '../in-process.js';
import type { CallEndStage, RequestStage } from '../stage.js';

export function admitStage(gate: InFlightGate): RequestStage {
  return {
    name: 'admit',
    hook: 'onRequest',
    run(request) {
      const place = gate.enter();
      if (!place) throw new ApiError('server_overloaded', MESSAGES.overloaded, { headers: { 'retry-after': '1' } });
      request.call.place = place;
    },
  };
}

export function releasePlaceStage(): CallEndStage {
  return { name: 'release place', hook: 'callEnd', run: (request) => request.call.place?.release() };
}

export function authenticateStage(deps: { keys: KeyRegistry; gate: InFlightGate; credentials: InternalCredentials }): RequestStage {
  return {
    name: 'authenticate',
    hook: 'onRequest',
    run(request) {
      if (request.routeOptions.config.declaration?.auth === false) return;
      const place = request.call.place!;
      const admitAs = (principal: Principal) => {
        request.call.principal = principal;
        const full = place.share(principal.keyId, principal.projectId, principal.accountId);
        if (full) {
          place.release();
          throw shareFull(full, principal, deps.gate);
        }
      };
      // A refused call gives its place back at once, not when its answer has been read: calls without a valid key
      // hold no place while their answers wait behind others on a connection nobody reads.
      const refuse = (err: unknown): never => {
        place.release();
        throw err;
      };
      try {
        admitAs(principalOf(request, deps));
      } catch (err) {
        // A key another replica made a moment ago may not be in this one's copy yet: it is looked for once more
        // after catching up with PostgreSQL (store: postgres).
        if (!(err instanceof ApiError) || err.code !== 'invalid_api_key' || !deps.keys.mayBeNew(request.headers.authorization)) {
          return refuse(err);
        }
        return deps.keys.refresh().then(() => admitAs(principalOf(request, deps)), refuse);
      }
    },
  };
}

/**
 * The key a call acts as: the one its bearer secret names, or, for a call the daemon makes to itself (a batch's line),
 * the one its in-process credential was issued for (auth/internal.ts). That credential is looked for only on a call
 * that came through no network connection; a network call carrying its header is refused outright.
 */
function principalOf(request: FastifyRequest, deps: { keys: KeyRegistry; credentials: InternalCredentials }): Principal {
  const internal = request.headers[INTERNAL_CREDENTIAL_HEADER];
  if (internal === undefined) return authenticate(request.headers.authorization, deps.keys, request.raw.socket);
  if (!isInProcess(request) || typeof internal !== 'string') throw refusedFromNetwork();
  return deps.credentials.redeem(internal);
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
