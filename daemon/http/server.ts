// Builds the fastify application: the pipeline's hooks, the routes, and the error handling that keeps every
// response in OpenAI's shape with our headers. It listens nowhere; the service decides where.
import { randomFillSync } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { Accounts } from '../accounts/index.js';
import { registerDashboard, type DashboardDeps } from '../dashboard/index.js';
import { healthReport } from '../health/index.js';
import { lazyChildLogger } from '../log/index.js';
import { ApiError } from '../errors/index.js';
import { registerAuditStage } from './audit.js';
import { registerJsonBody } from './body.js';
import { BodyIdleWatch } from './body-idle.js';
import { ReaderIdleWatch } from './reader-idle.js';
import { clientGone, sendError, toApiError, writeClientError, writeResponseError, writeSocketError } from './errors.js';
import { identifyStage, registerStages, v1Stages, type PipelineDeps, type Stage } from './pipeline.js';
import { settleRefusedBody } from './refused-body.js';
import { registerAuditRoutes } from './routes/audit.js';
import { registerChatRoute } from './routes/chat.js';
import { registerDocumentRoutes } from './routes/documents.js';
import { registerEmbeddingsRoute } from './routes/embeddings.js';
import { registerImageRoutes } from './routes/images.js';
import { registerLivenessRoute, registerServiceRoutes } from './routes/service.js';
import { registerTranscriptionRoute } from './routes/transcriptions.js';
import './context.js';

export interface AppOptions {
  https?: { cert: Buffer; key: Buffer };
  logger: FastifyServerOptions['logger'];
}

/** Random bytes for request ids, drawn from the CSPRNG 256 ids at a time. */
const idBytes = Buffer.alloc(16 * 256);
let idAt = idBytes.length;

/**
 * `req_` and 128 random bits in hex. Taken from a pool refilled in one call: a UUID with its dashes removed costs
 * four times as much, on every call.
 */
function newRequestId(): string {
  if (idAt === idBytes.length) {
    randomFillSync(idBytes);
    idAt = 0;
  }
  const id = idBytes.toString('hex', idAt, idAt + 16);
  idAt += 16;
  return `req_${id}`;
}

export function buildApp(deps: PipelineDeps, options: AppOptions): FastifyInstance {
  const { config } = deps;
  // Node answers a request without Host with a bare 400 of its own; we answer everything ourselves.
  const app = Fastify({
    ...(options.https ? { https: { ...options.https, requireHostHeader: false } } : { http: { requireHostHeader: false } }),
    logger: options.logger,
    childLoggerFactory: lazyChildLogger,
    logController: new LogController({ disableRequestLogging: !config.log.requests }),
    bodyLimit: config.limits.bodyBytes,
    requestTimeout: config.timeouts.requestMs,
    keepAliveTimeout: config.timeouts.keepAliveMs,
    genReqId: newRequestId,
    requestIdHeader: false,
    // Our own drain stage answers requests that arrive while closing, with our headers.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: true, allErrors: false } },
    clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket) {
      writeClientError(err, socket, { ...deps.fixedHeaders, 'X-Request-Id': newRequestId() });
    },
    frameworkErrors(err, request, reply) {
      reply.headers(deps.fixedHeaders).header('x-request-id', request.id);
      void sendError(request, reply, toApiError(err, config.limits.bodyBytes));
    },
  });

  registerJsonBody(app);
  registerStages(app, [identifyStage(deps), watchBodyStage(app, deps), watchReaderStage(app, deps)]);
  guardServer(app, deps);
  closeConnectionsAsCallsEnd(app, deps);

  // A response sent before its request body was read closes the connection once the rest of the body, within bounds,
  // has been read and thrown away (refused-body.ts).
  app.addHook('onSend', (request, reply, payload, done) => {
    settleRefusedBody(request, reply);
    done(null, payload);
  });

  // Path → methods, to tell "wrong method" (405) from "no such route" (404).
  const methodsByPath = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const set = methodsByPath.get(route.url) ?? new Set<string>();
    for (const m of methods) set.add(m);
    methodsByPath.set(route.url, set);
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    // A call cut off for its idle body has had its 408 (the body's reading then fails): its audit entry says 408 too.
    const apiError = request.call?.cutOff ?? toApiError(error, config.limits.bodyBytes);
    // Health says why writes fail until one succeeds again.
    if (apiError.code === 'storage_unavailable')
      deps.store?.writes.note(error, `${request.method} ${request.routeOptions.url ?? request.url}`);
    if (clientGone(request)) request.log.info({ code: apiError.code }, 'the client closed the connection before its answer');
    else if (apiError.status >= 500 && !(error instanceof ApiError)) request.log.error({ err: error }, 'unhandled error');
    return sendError(request, reply, apiError);
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? request.url;
    const methods = methodsByPath.get(path);
    if (methods && !methods.has(request.method)) {
      const allowed = [...methods].filter((m) => m !== 'HEAD').join(', ');
      reply.header('allow', allowed);
      return sendError(
        request,
        reply,
        new ApiError('method_not_allowed', `${request.method} is not supported on ${path}; use ${allowed}.`),
      );
    }
    return sendError(
      request,
      reply,
      new ApiError(
        'not_found',
        `No route ${request.method} ${path}. Every API path starts with /v1 (for example POST /v1/chat/completions).`,
      ),
    );
  });

  registerLivenessRoute(app);
  const { accounts } = deps;
  // Its deps are gathered when the app starts, not now: the service opens the audit log after buildApp.
  if (accounts) void app.register(async (scope) => registerDashboard(scope, dashboardDeps(deps, accounts)));
  void app.register(
    async (v1) => {
      registerStages(v1, v1Stages(deps));
      registerAuditStage(v1, deps);
      const usage = deps.usage;
      if (usage) {
        v1.addHook('onResponse', (request, reply, done) => {
          const principal = request.call.principal;
          if (principal) {
            const route = request.routeOptions.url ?? 'unknown';
            usage.record(principal.keyId, route, reply.statusCode);
            // Tokens are final once the engine has stopped (an abandoned call's engine reports after its response).
            const call = request.call;
            const tokens = () => {
              if (call.usedTokens)
                usage.recordTokens(principal.keyId, route, call.usedTokens - call.completionTokens, call.completionTokens);
            };
            if (call.engineWork) void call.engineWork.then(tokens, tokens);
            else tokens();
          }
          done();
        });
      }
      registerServiceRoutes(v1, deps);
      registerChatRoute(v1, deps);
      registerEmbeddingsRoute(v1, deps);
      registerAuditRoutes(v1, deps);
      registerDocumentRoutes(v1, deps);
      registerTranscriptionRoute(v1, deps);
      registerImageRoutes(v1, deps);
    },
    { prefix: '/v1' },
  );
  return app;
}

/** What the dashboard reads of the pipeline's deps: it is served only beside the audit log, usage meter and store. */
function dashboardDeps(deps: PipelineDeps, accounts: Accounts): DashboardDeps {
  const { config, keys, catalog, audit, usage, store } = deps;
  if (!audit || !usage || !store) throw new Error('The dashboard is served only with the audit log, the usage meter and the store.');
  return { config, keys, accounts, catalog, audit, usage, store, health: () => healthReport(deps) };
}

/**
 * While draining, a connection carries no call once its call has ended: it is closed then, not left open until its
 * keep-alive timeout (the openai SDK keeps its connections), so the drain ends with the last call. Node closes only
 * the connections idle when the server stops listening; one whose response was still going out becomes idle later.
 */
function closeConnectionsAsCallsEnd(app: FastifyInstance, deps: PipelineDeps): void {
  app.addHook('onResponse', (_request, _reply, done) => {
    // Idle: the request read whole and its response finished. A pipelined request's response is not finished.
    if (deps.state.draining) app.server.closeIdleConnections();
    done();
  });
}

/**
 * Watches every request body as it arrives (body-idle.ts): one that goes timeouts.bodyIdleMs without a byte gets 408
 * in OpenAI's shape, with the call's own headers, and its connection is closed once that has gone out.
 */
function watchBodyStage(app: FastifyInstance, deps: PipelineDeps): Stage {
  const idleMs = deps.config.timeouts.bodyIdleMs;
  const watch = new BodyIdleWatch(idleMs, (request) => {
    const error = new ApiError(
      'request_timeout',
      `The request body stopped arriving: nothing came for ${idleMs / 1000} s (timeouts.bodyIdleMs). Send the whole body without pausing.`,
    );
    request.call.cutOff = error;
    request.log.info({ idleMs }, 'a request body stopped arriving; the connection is closed');
    const socket = request.raw.socket;
    writeSocketError(socket, 408, 'Request Timeout', error, { ...deps.fixedHeaders, 'X-Request-Id': request.id });
    // Once the answer has gone; a client that reads nothing at all is not waited for long.
    const destroy = () => socket.destroy();
    socket.once('finish', destroy);
    setTimeout(destroy, 1000).unref();
  });
  app.addHook('onClose', (_instance, done) => {
    watch.close();
    done();
  });
  return { name: 'watch body', hook: 'onRequest', run: (request, reply) => watch.watch(request, reply) };
}

/**
 * Watches every connection once it carries a call (reader-idle.ts): one whose answer waits timeouts.readerIdleMs on a
 * client that reads none of it is closed, which ends its call.
 */
function watchReaderStage(app: FastifyInstance, deps: PipelineDeps): Stage {
  const idleMs = deps.config.timeouts.readerIdleMs;
  const watch = new ReaderIdleWatch(idleMs, (socket) => {
    app.log.info({ idleMs, waitingBytes: socket.writableLength }, 'a client stopped reading its answer; the connection is closed');
    // A reset, where the connection allows one: the kernel drops what it still held for the client at once, and the
    // client learns that its answer was cut rather than waiting for the rest.
    try {
      socket.resetAndDestroy();
    } catch {
      socket.destroy();
    }
  });
  app.addHook('onClose', (_instance, done) => {
    watch.close();
    done();
  });
  return { name: 'watch reader', hook: 'onRequest', run: (request) => watch.watch(request.raw.socket) };
}

/** Node-level events fastify does not route: they still get our headers and error shape. */
function guardServer(app: FastifyInstance, deps: PipelineDeps): void {
  const server = app.server;
  const headers = () => ({ ...deps.fixedHeaders, 'X-Request-Id': newRequestId() });
  // The whole request, body included, must arrive within timeouts.requestMs (Node would otherwise wait for
  // whichever of its two timeouts is longer).
  server.headersTimeout = deps.config.timeouts.requestMs;
  // Only a caller with a valid key is invited to send its body.
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    const match = /^Bearer +(\S+) *$/i.exec(req.headers.authorization ?? '');
    if (match && deps.keys.authenticate(match[1]!)) res.writeContinue();
    server.emit('request', req, res);
  });
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) => {
    writeResponseError(res, 417, 'Unsupported Expect header: only "100-continue" is understood. Remove the header.', headers());
  });
  server.on('connect', (_req: IncomingMessage, socket: Socket) => {
    writeClientError(Object.assign(new Error('CONNECT'), { code: 'CONNECT' }), socket, headers());
  });
}
