// In-process credentials: how a call the daemon makes to itself (a batch's line, run through the whole pipeline by
// fastify's inject) is authenticated as the key that asked for it. The daemon never holds a key's secret (only its
// hash is stored), so it cannot present one; instead it issues a credential for one call, naming the key, and the
// authenticate stage redeems it.
//
// Such a credential cannot be presented from the network, for three reasons that each suffice: the authenticate stage
// looks for it only on a request that arrived without a network connection (an injected one: its socket is not a
// net.Socket), and refuses a network request that carries the header at all; a credential is 256 random bits that
// never leave the process (not stored, not logged, not sent anywhere); and it is good for one call, within a minute.
import { randomBytes } from 'node:crypto';
import { ApiError } from '../errors/index.js';
import type { KeyRegistry } from '../keys/index.js';
import { principalOf, type Principal } from './principal.js';

/** The header an in-process call carries its credential in. */
export const INTERNAL_CREDENTIAL_HEADER = 'x-sovereign-internal-credential';

/** How long an issued credential waits to be redeemed: the call it was made for is injected at once. */
const VALID_MS = 60_000;

interface Issued {
  keyId: string;
  projectId: string;
  until: number;
}

export class InternalCredentials {
  private readonly issued = new Map<string, Issued>();

  constructor(
    private readonly keys: KeyRegistry,
    private readonly now: () => number = Date.now,
  ) {}

  /** A credential for one in-process call made as key `keyId` of project `projectId`. */
  issue(keyId: string, projectId: string): string {
    this.forgetExpired();
    const token = randomBytes(32).toString('base64url');
    this.issued.set(token, { keyId, projectId, until: this.now() + VALID_MS });
    return token;
  }

  /**
   * The principal of an in-process call presenting `token`: the key it was issued for, as it stands now (its limits,
   * its project's). Spent once redeemed. 401 when the token is unknown, spent or expired, or the key has since been
   * revoked or moved: a batch's remaining lines then fail as that key's calls would.
   */
  redeem(token: string): Principal {
    const issued = this.issued.get(token);
    this.issued.delete(token);
    if (!issued || issued.until <= this.now()) {
      throw new ApiError('invalid_api_key', 'This in-process call presented a credential that is spent or expired.');
    }
    const match = this.keys.active(issued.keyId);
    if (!match || match.record.projectId !== issued.projectId) {
      throw new ApiError(
        'invalid_api_key',
        `The key ${issued.keyId} that made this batch has been revoked: its remaining lines are refused. Create the batch again with an active key.`,
      );
    }
    return principalOf(match);
  }

  /** Credentials issued and not redeemed (a call refused before authentication, while the daemon drains). */
  private forgetExpired(): void {
    const now = this.now();
    for (const [token, issued] of this.issued) if (issued.until <= now) this.issued.delete(token);
  }
}

/** The 401 for a request from the network that carries the in-process header: it is never looked at there. */
export function refusedFromNetwork(): ApiError {
  return new ApiError(
    'invalid_api_key',
    `The ${INTERNAL_CREDENTIAL_HEADER} header is not accepted over the network. Send your key in an 'Authorization: Bearer <key>' header.`,
  );
}
