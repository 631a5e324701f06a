// Stage 10, audit: every authenticated call's entry is appended to the audit log and on disk before its response
// leaves; the response says which leaf it is (X-Audit-Leaf). A streamed response is recorded when it ends, with the
// digest of what was sent, and names its leaf in a last SSE comment before [DONE]. If the log cannot record, the
// call is answered 503 audit_unavailable: no response goes out unlogged. The one exception is health (an essential
// route), which is what says why: while the log cannot record, it is answered without an entry.
import { hash } from 'node:crypto';
import { Stream } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors/index.js';
import { writeFailureOf } from '../store/index.js';
import type { PipelineDeps } from './pipeline.js';

export function sha256Hex(data: string | Uint8Array | null | undefined): string {
  return hash('sha256', data ?? '', 'hex');
}

/** Whether the call gets an entry: it has a key and has not been recorded yet. */
function willRecord(deps: PipelineDeps, request: FastifyRequest): boolean {
  return deps.audit !== undefined && request.call.principal !== null && !request.call.audited;
}

/** Appends the call's entry; null when the call is not audited (no key, or already recorded). */
export function recordCall(deps: PipelineDeps, request: FastifyRequest, status: number, responseSha256: string): Promise<number> | null {
  const principal = request.call.principal;
  if (!deps.audit || !principal || request.call.audited) return null;
  request.call.audited = true;
  return deps.audit.record({
    requestId: request.id,
    keyId: principal.keyId,
    projectId: principal.projectId,
    method: request.method,
    route: request.routeOptions.url ?? request.url.split('?')[0]!,
    model: request.call.model?.id ?? null,
    status,
    redactions: request.call.redactions,
    answerRedactions: request.call.outputRedactions,
    requestSha256: request.call.requestSha256 ?? sha256Hex(''),
    responseSha256,
    leftBoundary: request.call.leftBoundary,
  });
}

/** For a stream whose content has already gone out: it cannot be withheld, but the client is told. */
export const AUDIT_FAILED_AFTER_STREAM = new ApiError(
  'audit_unavailable',
  'The audit log could not record this call after its answer was streamed. Report the X-Request-Id to the operator.',
);

export const AUDIT_UNAVAILABLE = new ApiError(
  'audit_unavailable',
  'The audit log could not record this call, so its result was withheld. Retry shortly; if it persists, the operator must check the data disk.',
  { headers: { 'retry-after': '5' } },
);

/** The 503 for a call the log could not record; when a full disk stopped the log, it says so and what to do. */
function auditUnavailable(stoppedBy: Error | null): ApiError {
  if (!writeFailureOf(stoppedBy)) return AUDIT_UNAVAILABLE;
  return new ApiError(
    'audit_unavailable',
    "The audit log cannot be written (the daemon's data disk is full or failing), so this call's result was withheld. The operator must free space on the data disk (GET /v1/health says what failed); the log takes entries again by itself. Retry after the seconds in Retry-After.",
    { headers: { 'retry-after': '10' } },
  );
}

export function registerAuditStage(v1: FastifyInstance, deps: PipelineDeps): void {
  const audit = deps.audit;
  if (!audit) return;
  // A callback hook, not an async one: every call passes here, and the recording is the only thing to wait for.
  v1.addHook('onSend', (request, reply, payload, done) => {
    // Streams are recorded by their route when they end, with what was really sent.
    if (payload instanceof Stream || !willRecord(deps, request)) return done(null, payload);
    const essential = request.routeOptions.config.declaration?.essential === true;
    // Health, while the log takes no entry: answered (it says why), and unlogged: there is nowhere to log it.
    if (essential && audit.log.stoppedBy) return done(null, payload);
    // A serialised answer is a string: encoded here once, the same bytes are hashed and sent. Left a string, it
    // would be encoded three times (for the digest, for its content-length, and on the socket).
    const body = typeof payload === 'string' ? Buffer.from(payload) : (payload as Buffer | null);
    let recording: Promise<number> | null;
    try {
      recording = recordCall(deps, request, reply.statusCode, sha256Hex(body));
    } catch (err) {
      return done(err as Error);
    }
    if (!recording) return done(null, body);
    recording.then(
      (leaf) => {
        reply.header('x-audit-leaf', String(leaf));
        done(null, body);
      },
      (err: Error) => {
        request.log.error({ err: err.message }, 'the audit log could not record a call');
        if (essential) return done(null, body);
        const refusal = auditUnavailable(audit.log.stoppedBy);
        reply.code(refusal.status).headers(refusal.headers);
        done(null, JSON.stringify(refusal.toBody()));
      },
    );
  });
}
