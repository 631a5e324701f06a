// Audit, on /v1: every authenticated call's entry is appended to the audit log and on disk before its response
// leaves; the response says which leaf it is (X-Audit-Leaf) of which log (X-Audit-Log, the log's origin: in a
// cluster each replica keeps its own). A streamed response gets a start entry on disk before
// its first byte, and is recorded when it ends, with the digest of what was sent and its start's leaf, naming its
// own leaf in a last SSE comment before [DONE]. If the log cannot record, the call is answered 503
// audit_unavailable: no response goes out unlogged. The one exception is health (an essential route), which is what
// says why: while the log cannot record, it is answered without an entry.
import { hash } from 'node:crypto';
import { Stream } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AuditService } from '../../audit/index.js';
import { ApiError } from '../../errors/index.js';
import { ScrubSession, StreamScrubber } from '../../scrub/index.js';
import { writeFailureOf } from '../../store/index.js';
import type { SendStage } from '../stage.js';

/** What recording needs: the daemon's audit log. The app cannot be built without one. */
export interface AuditDeps {
  audit: AuditService;
}

export function sha256Hex(data: string | Uint8Array | null | undefined): string {
  return hash('sha256', data ?? '', 'hex');
}

/** Whether the call gets an entry: it has a key and has not been recorded yet. */
function willRecord(request: FastifyRequest): boolean {
  return request.call.principal !== null && !request.call.audited;
}

/** The longest model name an entry records (the API refuses longer ones with a 400, which is logged too). */
export const LOGGED_MODEL_NAME = 256;
/** How much of a longer name is scrubbed before it is cut, so that a value cut in two is still found whole. */
const SCRUBBED_MODEL_NAME = 4 * LOGGED_MODEL_NAME;

/**
 * The model a call's entry names: the served model's id, else the name the client sent as a string (a model that
 * does not exist, or one refused before it was resolved). That name is client input, so it is scrubbed as a prompt
 * is (an ID written as a model name lands in the log as its placeholder) and cut to LOGGED_MODEL_NAME characters.
 */
function modelOf(request: FastifyRequest): string | null {
  if (request.call.model) return request.call.model.id;
  const asked = (request.body as { model?: unknown } | null | undefined)?.model;
  if (typeof asked !== 'string' || asked === '') return null;
  return loggedModelName(asked);
}

/** A model name the client sent, as an entry records it: scrubbed, then cut to LOGGED_MODEL_NAME characters. */
export function loggedModelName(asked: string): string {
  let scrubbed: string;
  if (asked.length <= SCRUBBED_MODEL_NAME) scrubbed = new ScrubSession().scrub(asked);
  else {
    // Only the first SCRUBBED_MODEL_NAME characters are read, and a value may run on past them: scrubbing them as a
    // whole text would leave such a value's start, which with its check digit can be all of it. What cannot be
    // settled without the rest is held back, as the tail of a streamed answer is, and not recorded. (Placeholders can
    // be far shorter than what they replace, so a value near the end of what is read can land within the cut.)
    try {
      scrubbed = new StreamScrubber(new ScrubSession()).push(asked.slice(0, SCRUBBED_MODEL_NAME));
    } catch {
      scrubbed = '';
    }
  }
  const name = scrubbed.slice(0, LOGGED_MODEL_NAME);
  // The cut may split a character in two (a surrogate pair): half of one is no Unicode text.
  return /[\ud800-\udbff]$/.test(name) ? name.slice(0, -1) : name;
}

/**
 * A call to a /v1 path no route serves: its entry names this, not the path, which is the client's text (an ID written
 * in it must not land in the log).
 */
export const NO_ROUTE = '/v1/*';

/** The route a call's entry names: its pattern, not the path with ids in it. */
const routeOf = (request: FastifyRequest) => request.routeOptions.url ?? NO_ROUTE;

/** Appends the call's entry; null when the call is not audited (no key, or already recorded). */
export function recordCall(deps: AuditDeps, request: FastifyRequest, status: number, responseSha256: string): Promise<number> | null {
  const principal = request.call.principal;
  if (!principal || request.call.audited) return null;
  request.call.audited = true;
  return deps.audit.record({
    requestId: request.id,
    keyId: principal.keyId,
    projectId: principal.projectId,
    method: request.method,
    route: routeOf(request),
    model: modelOf(request),
    status,
    redactions: request.call.redactions,
    answerRedactions: request.call.outputRedactions,
    requestSha256: request.call.requestSha256 ?? sha256Hex(''),
    responseSha256,
    leftBoundary: request.call.leftBoundary,
    streamStart: request.call.streamStart,
  });
}

/**
 * Appends a stream's start entry and waits until it is on disk: called before the stream's first byte, so a stream
 * cut off by a crash still leaves its start in the log. If it cannot be written, the stream is refused with 503
 * audit_unavailable (thrown), as a buffered call would be: nothing leaves unlogged.
 */
export async function recordStreamStart(deps: AuditDeps, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  const principal = request.call.principal;
  if (!principal || request.call.audited) return;
  try {
    request.call.streamStart = await deps.audit.append('stream.start', {
      request_id: request.id,
      key: principal.keyId,
      project: principal.projectId,
      route: routeOf(request),
      model: modelOf(request),
      request_sha256: request.call.requestSha256 ?? sha256Hex(''),
    });
    // The stream's headers leave with its first byte: they name the log its entries are in.
    reply.header('x-audit-log', deps.audit.originName);
  } catch (err) {
    request.log.error({ err: (err as Error).message }, 'the audit log could not record the start of a stream');
    throw auditUnavailable(deps.audit.log.stoppedBy);
  }
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

export function auditStage(deps: AuditDeps): SendStage {
  const audit = deps.audit;
  // Fixed for the life of the process: a log keeps its origin.
  const logName = audit.originName;
  // A callback hook, not an async one: every call passes here, and the recording is the only thing to wait for.
  const run: SendStage['run'] = (request, reply, payload, done) => {
    // Streams are recorded by their route when they end, with what was really sent.
    if (payload instanceof Stream || !willRecord(request)) return done(null, payload);
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
        reply.header('x-audit-log', logName);
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
  };
  return { name: 'audit', hook: 'onSend', run };
}
