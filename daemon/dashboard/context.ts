// What every resource of the dashboard's API shares: the daemon's deps, the session cookies and the record of who
// changed what. Made once per daemon, in api.ts.
import type { FastifyBaseLogger } from 'fastify';
import type { UserRecord } from '../accounts/index.js';
import type { EntryFields, EntryKind } from '../audit/index.js';
import { usesTls } from '../config/index.js';
import { ApiError } from '../errors/index.js';
import { cookieNames, serializeCookie, type CookieNames } from './cookies.js';
import type { DashboardDeps } from './deps.js';

export interface DashboardContext {
  deps: DashboardDeps;
  /** Cookies are Secure except on plain HTTP, which is served on loopback only (the device posture). */
  secure: boolean;
  cookies: CookieNames;
  /** A Set-Cookie line; `maxAge` 0 removes the cookie. */
  cookie: (name: string, value: string, maxAge: number, httpOnly: boolean) => string;
  trail: AdminTrail;
}

/**
 * Who did what, logged before the answer (as a call's entry is). A change MUST check `writable()` before it is made
 * (a log that takes no entry refuses it) and MUST await `record()` before it answers.
 */
export interface AdminTrail {
  writable(): void;
  record(by: EntryFields['by'], kind: EntryKind, fields: EntryFields): Promise<void>;
}

/** An account as the author of an audit entry. */
export const asUser = (user: UserRecord) => ({ account: user.id });

export function dashboardContext(deps: DashboardDeps, log: FastifyBaseLogger): DashboardContext {
  // Plain HTTP is served on loopback only (the device posture), where a Secure cookie would never come back.
  const secure = usesTls(deps.config.posture);
  return {
    deps,
    secure,
    cookies: cookieNames(secure),
    cookie: (name, value, maxAge, httpOnly) => serializeCookie(name, value, { secure, httpOnly, maxAge }),
    trail: adminTrail(deps, log),
  };
}

function adminTrail({ audit }: DashboardDeps, log: FastifyBaseLogger): AdminTrail {
  return {
    writable() {
      if (audit.log.stoppedBy) {
        throw new ApiError('audit_unavailable', 'The audit log cannot record changes now (see /v1/health); nothing was changed.', {
          headers: { 'retry-after': '5' },
        });
      }
    },
    async record(by, kind, fields) {
      try {
        await audit.append(kind, { by, ...fields });
      } catch (err) {
        log.error({ kind, err: (err as Error).message }, 'an administrative action could not be logged');
        throw new ApiError('audit_unavailable', 'The change was made, but the audit log could not record it; see /v1/health.', {
          headers: { 'retry-after': '5' },
        });
      }
    },
  };
}
