// The per-key limits, on metered postures: limit requests (onRequest), limit tokens (a reservation made before the
// engine runs) and settle tokens (when the call ends, the reservation becomes what the engine used).
import type { Principal } from '../../auth/index.js';
import type { Config } from '../../config/index.js';
import { keyLimits, LimiterUnavailableError, type KeyLimits, type KeyQuota, type LimitHeaders } from '../../limits/index.js';
import type { CallEndStage, RequestStage } from '../stage.js';

export interface LimitsDeps {
  config: Config;
  limits: KeyLimits;
}

/**
 * Per authenticated key (a principal object: a change to a key or its project makes a new one), its quota, made once:
 * the limits come from the key, its plan, its project and the configuration, none of which changes between calls.
 */
const quotas = new WeakMap<Principal, KeyQuota>();
function quotaOf(principal: Principal, config: Config): KeyQuota {
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

export function limitRequestsStage(deps: LimitsDeps): RequestStage {
  return {
    name: 'limit requests',
    hook: 'onRequest',
    run(request, reply) {
      const principal = request.call.principal;
      if (!principal) return;
      const quota = quotaOf(principal, deps.config);
      request.call.quota = quota;
      // An essential route (health) is still served when the shared limiter does not answer.
      const tolerate = (err: unknown) => {
        if (!(err instanceof LimiterUnavailableError && request.routeOptions.config.declaration?.essential)) throw err;
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
  };
}

export function limitTokensStage(deps: LimitsDeps): RequestStage {
  return {
    name: 'limit tokens',
    hook: 'preHandler',
    run(request, reply) {
      const estimate = request.routeOptions.config.declaration?.tokens;
      const quota = request.call.quota;
      if (!estimate || !quota) return;
      const tokens = Math.max(1, Math.ceil(estimate(request.body, request.call.model?.contextTokens, request.call)));
      const headers = deps.limits.reserveTokens(quota, tokens);
      if (!(headers instanceof Promise)) {
        reply.headers(headers);
        request.call.reservedTokens = tokens;
        return;
      }
      const reserved = headers.then((h) => void reply.headers(h));
      request.call.reservedTokens = reserved.then(
        () => tokens,
        () => 0,
      );
      return reserved;
    },
  };
}

/**
 * When the call ends, finished or abandoned, its reservation becomes what the engine reports it used (an engine
 * reports even for aborted work; a call that never reached one used nothing). An abandoned call's engine reports only
 * once it has stopped, so the settling waits for it.
 */
export function settleTokensStage(deps: LimitsDeps): CallEndStage {
  return {
    name: 'settle tokens',
    hook: 'callEnd',
    run(request) {
      const call = request.call;
      const quota = call.quota;
      if (!quota) return;
      const settle = (reserved: number) => {
        if (!reserved) return;
        const used = () => deps.limits.settleTokens(quota, reserved, call.usedTokens ?? 0);
        if (call.engineWork) void call.engineWork.then(used, used);
        else used();
      };
      // A call that ended while its reservation was still being made settles once it is made.
      if (typeof call.reservedTokens === 'number') settle(call.reservedTokens);
      else void call.reservedTokens.then(settle);
    },
  };
}
