// Builds the fastify application: the pipeline's hooks, the routes, and the error handling that keeps every
// response in OpenAI's shape with our headers. It listens nowhere; the service decides where.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { registerDashboard, type DashboardDeps } from '../dashboard/index.js';
import { healthReport } from '../health/index.js';
import { lazyChildLogger } from '../log/index.js';
import { ApiError } from '../errors/index.js';
import type { Store } from '../store/index.js';
import { registerJsonBody } from './body.js';
import { clientGone, sendError, toApiError, writeClientError, writeResponseError } from './errors.js';
import { pipeline, type PipelineDeps, type Scope } from './pipeline.js';
import { registerStages } from './stage.js';
import { registerAuditRoutes, type AuditRouteDeps } from './routes/audit.js';
import { registerBatchRoutes, type BatchRouteDeps } from './routes/batches.js';
import { registerChatRoute, type ChatRouteDeps } from './routes/chat.js';
import { registerCompletionsRoute, type CompletionsRouteDeps } from './routes/completions.js';
import { registerResponsesRoutes, type ResponsesRouteDeps } from './routes/responses.js';
import { registerDocumentRoutes, type DocumentRouteDeps } from './routes/documents.js';
import { registerEmbeddingsRoute, type EmbeddingsRouteDeps } from './routes/embeddings.js';
import { registerFileRoutes, type FileRouteDeps } from './routes/files.js';
import { registerImageRoutes, type ImageRouteDeps } from './routes/images.js';
import { registerLivenessRoute, registerServiceRoutes, type ServiceRouteDeps } from './routes/service.js';
import { registerTranscriptionRoute, type TranscriptionRouteDeps } from './routes/transcriptions.js';
import './context.js';

/** Everything the app serves from: the pipeline's deps and each plugin's. */
export type AppDeps = PipelineDeps &
  ServiceRouteDeps &
  ChatRouteDeps &
  CompletionsRouteDeps &
  ResponsesRouteDeps &
  EmbeddingsRouteDeps &
  AuditRouteDeps &
  DocumentRouteDeps &
  TranscriptionRouteDeps &
  ImageRouteDeps &
  FileRouteDeps &
  BatchRouteDeps &
  Omit<DashboardDeps, 'health'> & {
    /** Told of a write that failed for a full disk, so that health says why until one succeeds again. */
    store: Store;
  };

export interface AppOptions {
  https?: { cert: Buffer; key: Buffer };
  /** The daemon's logger (log/index.ts createLogger): it exists before the app. */
  log: FastifyBaseLogger;
}

/** `req_` and a random UUID's 32 hex digits: unique per call (SPEC), the same id in the call's audit entry. */
function newRequestId(): string {
  return `req_${randomUUID().replaceAll('-', '')}`;
}

export function buildApp(deps: AppDeps, options: AppOptions): FastifyInstance {
  const { config } = deps;
  // Node answers a request without Host with a bare 400 of its own; we answer everything ourselves.
  const app = Fastify({
    ...(options.https ? { https: { ...options.https, requireHostHeader: false } } : { http: { requireHostHeader: false } }),
    loggerInstance: options.log,
    childLoggerFactory: lazyChildLogger,
    logController: new LogController({ disableRequestLogging: !config.log.requests }),
    bodyLimit: config.limits.bodyBytes,
    requestTimeout: config.timeouts.requestMs,
    keepAliveTimeout: config.timeouts.keepAliveMs,
    genReqId: newRequestId,
    // Past this a path's parameter is refused by the router, before the pipeline (no key asked, no audit entry); the
    // routes bound their ids themselves.
    routerOptions: { maxParamLength: 1024 },
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
  const stages = pipeline(deps, app);
  const inScope = (scope: Scope) => stages.filter((s) => s.scope === scope).map((s) => s.stage);
  registerStages(app, inScope('every response'));
  guardServer(app, deps);

  answerErrors(app, deps);
  const unknownRoute = answerUnknownRoutes(app);

  registerLivenessRoute(app, deps.store?.shared ?? null);
  registerDashboard(app, dashboardDeps(deps));
  void app.register(
    async (v1) => {
      registerStages(v1, inScope('/v1'));
      // A /v1 path no route serves is answered inside /v1, so its call meets the /v1 stages like any other: a key is
      // required (401 without one), and an authenticated call has its audit entry and X-Audit-Leaf.
      v1.setNotFoundHandler(unknownRoute);
      registerServiceRoutes(v1, deps);
      registerChatRoute(v1, deps);
      registerCompletionsRoute(v1, deps);
      registerResponsesRoutes(v1, deps);
      registerEmbeddingsRoute(v1, deps);
      registerAuditRoutes(v1, deps);
      registerDocumentRoutes(v1, deps);
      registerTranscriptionRoute(v1, deps);
      registerImageRoutes(v1, deps);
      registerFileRoutes(v1, deps);
      registerBatchRoutes(v1, deps);
    },
    { prefix: '/v1' },
  );
  return app;
}

/** What the dashboard reads: its share of the app's deps, and health's report made when asked. */
function dashboardDeps(deps: AppDeps): DashboardDeps {
  const { config, keys, accounts, catalog, audit, usage, store, metrics } = deps;
  return { config, keys, accounts, catalog, audit, usage, store, metrics, health: () => healthReport(deps) };
}

/** Every error, from any stage or route, in OpenAI's shape (errors.ts), logged once and only when it is ours. */
function answerErrors(app: FastifyInstance, deps: AppDeps): void {
  const bodyBytes = deps.config.limits.bodyBytes;
  app.setErrorHandler((error: FastifyError, request, reply) => {
    // A call cut off for its idle body has had its 408 (the body's reading then fails): its audit entry says 408 too.
    const apiError = request.call?.cutOff ?? toApiError(error, bodyBytes);
    // Health says why writes fail until one succeeds again.
    if (apiError.code === 'storage_unavailable')
      deps.store.writes.note(error, `${request.method} ${request.routeOptions.url ?? request.url}`);
    if (clientGone(request)) request.log.info({ code: apiError.code }, 'the client closed the connection before its answer');
    else if (apiError.status >= 500 && !(error instanceof ApiError)) request.log.error({ err: error }, 'unhandled error');
    return sendError(request, reply, apiError);
  });
}

/**
 * A path no route serves gets 404; a path served with other methods gets 405 and `Allow`. Returns the handler, for
 * the /v1 scope's own.
 */
function answerUnknownRoutes(app: FastifyInstance): (request: FastifyRequest, reply: FastifyReply) => FastifyReply {
  const methodsByPath = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const set = methodsByPath.get(route.url) ?? new Set<string>();
    for (const m of methods) set.add(m);
    methodsByPath.set(route.url, set);
  });
  const answer = (request: FastifyRequest, reply: FastifyReply): FastifyReply => {
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
  };
  app.setNotFoundHandler(answer);
  return answer;
}

/** Node-level events fastify does not route: they still get our headers and error shape. */
function guardServer(app: FastifyInstance, deps: AppDeps): void {
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
