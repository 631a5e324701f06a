// Calls the daemon makes to itself: a batch's lines, each run through the whole pipeline and its route by fastify's
// inject, as a call of the key that made the batch. Such a call has no network connection: its socket is inject's
// stand-in, never a net.Socket, which is what tells the stages that it came from inside (auth/internal.ts says why
// its credential cannot be presented from outside).
import { Socket } from 'node:net';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { INTERNAL_CREDENTIAL_HEADER, type InternalCredentials } from '../auth/index.js';
import type { LineCaller } from '../batches/index.js';

/** Whether the call came through no network connection: the daemon made it to itself. */
export function isInProcess(request: FastifyRequest): boolean {
  return !(request.raw.socket instanceof Socket);
}

/** Runs a batch line as a POST to its route, authenticated by a credential issued for that one call. */
export function inProcessCaller(app: FastifyInstance, credentials: InternalCredentials): LineCaller {
  return async ({ keyId, projectId, url, body }) => {
    const response = await app.inject({
      method: 'POST',
      url,
      payload: JSON.stringify(body),
      headers: { 'content-type': 'application/json', [INTERNAL_CREDENTIAL_HEADER]: credentials.issue(keyId, projectId) },
    });
    let parsed: unknown;
    try {
      parsed = JSON.parse(response.body);
    } catch {
      parsed = response.body;
    }
    const requestId = response.headers['x-request-id'];
    const retryAfter = Number(response.headers['retry-after']);
    return {
      status: response.statusCode,
      requestId: typeof requestId === 'string' ? requestId : null,
      body: parsed,
      retryAfterSeconds: Number.isFinite(retryAfter) ? retryAfter : null,
    };
  };
}
