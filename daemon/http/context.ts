// What the pipeline learns about a call as it goes through the stages.
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyRequest } from 'fastify';
import type { Principal } from '../auth/index.js';
import type { ApiError } from '../errors/index.js';
import type { InFlightPlace, KeyQuota } from '../limits/index.js';
import type { Capability, ServedModel } from '../models/index.js';
import type { BodyKind, RedactionCounts, ScrubSession } from '../scrub/index.js';

export interface CallContext {
  /** Set by the admit stage on every /v1 route: the call's place under the in-flight ceiling and in its shares. */
  place: InFlightPlace | null;
  /** Set by the authenticate stage on every /v1 route. */
  principal: Principal | null;
  /** Set on metered postures: the limits that apply to this key. */
  quota: KeyQuota | null;
  /** Set by the resolve-model stage for routes that name a model. */
  model: ServedModel | null;
  /**
   * Tokens reserved against the key's token limit, settled when the call ends: a promise while the shared limiter has
   * not answered (0 if it refused).
   */
  reservedTokens: number | Promise<number>;
  /** Tokens the call really used, reported by the handler. */
  usedTokens: number | null;
  /** Of those, the tokens the model generated (the rest are input). */
  completionTokens: number;
  /** The engine's work for this call, once it started: usage is final only when it has settled. */
  engineWork: Promise<unknown> | null;
  /** The frontier provider (upstream name) the call was sent to, if any: its audit entry says it left the boundary. */
  leftBoundary: string | null;
  /** What the scrub stage replaced, by type (counts only: values never leave the stage). */
  redactions: RedactionCounts | null;
  /** The request's scrubbing session, so that a model's answer is scrubbed with the same placeholders. */
  scrubSession: ScrubSession | null;
  /** What was replaced in the model's answer, by type, when answers are scrubbed. */
  outputRedactions: RedactionCounts | null;
  /** SHA-256 (hex) of the raw request body, for the audit entry. */
  requestSha256: string | null;
  /** The raw request body's size in bytes (a multipart upload's: its extracted text's), to decide where it is scrubbed. */
  bodyBytes: number;
  /** Set once the call's audit entry has been appended. */
  audited: boolean;
  /** A stream's `stream.start` entry (its leaf), appended before its first byte; its end entry names it. */
  streamStart: number | null;
  /** The error a call was cut off with before its body had arrived (its connection is closing). */
  cutOff: ApiError | null;
  /** The code of the error the call was answered with, if it was (the operator's errors by code). */
  errorCode: string | null;
}

/** What a route declares about itself; the pipeline's stages read it. */
export interface RouteDeclaration {
  /** false only for routes outside /v1 that supervisors call without a key. */
  auth: boolean;
  /**
   * Answered even when the shared rate limiter cannot decide (Redis down), without counting against the limit: health,
   * which must be able to say that the limiter is down.
   */
  essential?: boolean;
  /** The capability the body's `model` must have; the resolve-model stage enforces it. */
  capability?: Capability;
  /** Upper bound of the tokens a call may use, reserved before the engine runs (metered postures). */
  tokens?: (body: unknown, contextTokens: number | undefined, call: CallContext) => number;
  /** What the body is, for the scrub stage: every text in it an engine will see is scrubbed (daemon/scrub/requests.ts). */
  scrub?: BodyKind;
}

declare module 'fastify' {
  interface FastifyRequest {
    call: CallContext;
  }
  interface FastifyContextConfig {
    declaration?: RouteDeclaration;
  }
}

export function newCallContext(): CallContext {
  return {
    place: null,
    principal: null,
    quota: null,
    model: null,
    reservedTokens: 0,
    usedTokens: null,
    completionTokens: 0,
    engineWork: null,
    leftBoundary: null,
    redactions: null,
    scrubSession: null,
    outputRedactions: null,
    requestSha256: null,
    bodyBytes: 0,
    audited: false,
    streamStart: null,
    cutOff: null,
    errorCode: null,
  };
}

/** Marks the call as sent to a frontier provider when `model` is one of its models: its audit entry says so. */
export function noteModelUsed(call: CallContext, model: ServedModel): void {
  if (model.frontier && model.upstream) call.leftBoundary = model.upstream;
}

/**
 * Records that the call's engine work started on `model`: usage settles when it ends, and a frontier provider's model
 * marks the call as having left the sovereign boundary (as soon as the work starts: a call that fails on the way is
 * marked too, since part of it may have gone out).
 */
export function startedEngineWork(call: CallContext, model: ServedModel, work: Promise<unknown>): void {
  call.engineWork = work;
  noteModelUsed(call, model);
}

// On the raw message itself, not in a WeakMap (lifetime.ts says why). Node drops the message from its socket's parser
// once its response has gone, so this keeps nothing of a call that has ended.
const callRequest = Symbol('sovereign.request');
type WithRequest = IncomingMessage & { [callRequest]?: FastifyRequest };

/** Marks `request` as the call its raw message carries: an error Node's parser finds in its body is then its own. */
export function bindRequest(request: FastifyRequest): void {
  (request.raw as WithRequest)[callRequest] = request;
}

/**
 * The call whose body Node's parser was reading on `socket` (its request begun, its body not complete), if any: what
 * an error the parser finds there interrupts. Node's own request timeout finds the request the same way.
 */
export function requestBeingRead(socket: Socket): FastifyRequest | null {
  const incoming = (socket as Socket & { parser?: { incoming?: WithRequest | null } | null }).parser?.incoming;
  if (!incoming || incoming.complete) return null;
  return incoming[callRequest] ?? null;
}
