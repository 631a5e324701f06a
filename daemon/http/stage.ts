// What a pipeline stage is, and how a list of them becomes fastify hooks. The list itself, in order, is in
// pipeline.ts; docs/architecture.md draws it.
import type { FastifyInstance, FastifyReply, FastifyRequest, onSendHookHandler } from 'fastify';
import { onCallEnd } from './lifetime.js';

interface Named {
  name: string;
  /** Runs when the app closes (a stage that keeps a timer or a watch). */
  close?: () => void;
}

/** Before the handler. Returns a promise only when it has to wait: a stage that does not wait costs no promise. */
export interface RequestStage extends Named {
  hook: 'onRequest' | 'preHandler';
  run: (request: FastifyRequest, reply: FastifyReply) => void | Promise<void>;
}

/** On the serialised response, before it is written: may replace it (fastify's onSend, callback form). */
export interface SendStage extends Named {
  hook: 'onSend';
  run: onSendHookHandler;
}

/** Once the response has been written. */
export interface ResponseStage extends Named {
  hook: 'onResponse';
  run: (request: FastifyRequest, reply: FastifyReply) => void;
}

/**
 * When the call is over, finished or abandoned (lifetime.ts): exactly once per call, including a call whose
 * connection went away before its response was written, which fastify's onResponse does not promise.
 */
export interface CallEndStage extends Named {
  hook: 'callEnd';
  run: (request: FastifyRequest, reply: FastifyReply, finished: boolean) => void;
}

export type Stage = RequestStage | SendStage | ResponseStage | CallEndStage;

/**
 * Adds the stages to `app` as hooks, in the list's order. The stages of one phase run inside a single fastify hook,
 * so a call pays one hook per phase however many stages it has; the call-end stages are armed by the first
 * onRequest stage, once per call.
 */
export function registerStages(app: FastifyInstance, stages: Stage[]): void {
  const ofHook = <H extends Stage['hook']>(hook: H) =>
    stages.filter((s): s is Extract<Stage, { hook: H }> | (RequestStage & { hook: H }) => s.hook === hook);
  const ends = ofHook('callEnd').map((s) => s.run);
  const arm: RequestStage['run'] = (request, reply) =>
    onCallEnd(request, reply, (finished) => {
      for (const end of ends) end(request, reply, finished);
    });
  const onRequest = ofHook('onRequest').map((s) => s.run);
  if (ends.length) onRequest.unshift(arm);
  if (onRequest.length) app.addHook('onRequest', requestHook(onRequest));
  const preHandler = ofHook('preHandler').map((s) => s.run);
  if (preHandler.length) app.addHook('preHandler', requestHook(preHandler));
  for (const stage of ofHook('onSend')) app.addHook('onSend', stage.run);
  const onResponse = ofHook('onResponse').map((s) => s.run);
  if (onResponse.length) {
    app.addHook('onResponse', (request, reply, done) => {
      for (const run of onResponse) run(request, reply);
      done();
    });
  }
  const closers = stages.flatMap((s) => (s.close ? [s.close] : []));
  if (closers.length) {
    app.addHook('onClose', (_instance, done) => {
      for (const close of closers) close();
      done();
    });
  }
}

function requestHook(runs: Array<RequestStage['run']>) {
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
