// Bearer authentication for every /v1 call. Every failure is the same 401 (`invalid_api_key`) so a caller learns
// nothing about which keys exist; only "no key at all" gets its own wording, since that is a client bug.
import { ApiError } from '../errors/index.js';
import { sameSecret, type KeyRegistry } from '../keys/index.js';
import { principalOf, type Principal } from './principal.js';

export { principalOf, type Principal } from './principal.js';
export { InternalCredentials, INTERNAL_CREDENTIAL_HEADER, refusedFromNetwork } from './internal.js';

const BEARER = /^Bearer +(\S+) *$/i;

/** What a connection's last call authenticated as, and with which header, while the keys stood at `version`. */
interface ConnectionMemo {
  header: string;
  principal: Principal;
  version: number | undefined;
}

const memos = new WeakMap<object, ConnectionMemo>();

/**
 * The principal a call's Authorization header names. `connection` (the call's socket) lets the calls of one keep-alive
 * connection, which nearly always present the same header, skip hashing the secret: the header the connection's last
 * call authenticated with is enough again while no key has changed since, by any process (the version is read on
 * every call, so a revocation still applies to the next one). It is compared in constant time: a proxy's connection
 * may carry several clients' calls.
 */
export function authenticate(header: string | undefined, registry: KeyRegistry, connection?: object | null): Principal {
  if (!header) {
    throw new ApiError(
      'invalid_api_key',
      "No API key provided. Send your key in an 'Authorization: Bearer <key>' header; the operator creates keys with 'sovereign keys create' or in the dashboard.",
    );
  }
  const version = registry.version();
  const memo = connection ? memos.get(connection) : undefined;
  if (memo !== undefined && memo.version === version && sameSecret(memo.header, header)) return memo.principal;
  const bearer = BEARER.exec(header);
  const match = bearer ? registry.authenticate(bearer[1]!) : null;
  if (!match) {
    throw new ApiError(
      'invalid_api_key',
      'Invalid API key: it is malformed, unknown, revoked or rotated out. Use an active key from the dashboard or ask the operator for one.',
    );
  }
  const principal = principalOf(match);
  // A key's previous secret is accepted during a rotation's grace period, which ends at a time, not by a change the
  // version would show: only a match by the current secret is remembered.
  if (connection && match.current) memos.set(connection, { header, principal, version });
  return principal;
}
