// Builds the fastify application: the pipeline's hooks, the routes, and the error handling that keeps every
// response in OpenAI's shape with our headers. It listens nowhere; the service decides where.
import { randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import Fastify, { type FastifyError, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { ApiError } from '../errors/index.js';
import { registerJsonBody } from './body.js';
import { sendError, toApiError, writeClientError } from './errors.js';
import { identifyStage, registerStages, v1Stages, type PipelineDeps } from './pipeline.js';
import { registerChatRoute } from './routes/chat.js';
import { registerEmbeddingsRoute } from './routes/embeddings.js';
import { registerLivenessRoute, registerServiceRoutes } from './routes/service.js';
import './context.js';

export interface AppOptions {
  https?: { cert: Buffer; key: Buffer };
  logger: FastifyServerOptions['logger'];
}

const newRequestId = () => `req_${randomUUID().replaceAll('-', '')}`;

export function buildApp(deps: PipelineDeps, options: AppOptions): FastifyInstance {
  const { config } = deps;
  const app = Fastify({
    ...(options.https ? { https: options.https } : {}),
    logger: options.logger,
    disableRequestLogging: !config.log.requests,
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
  registerStages(app, [identifyStage(deps)]);

  // Path → methods, to tell "wrong method" (405) from "no such route" (404).
  const methodsByPath = new Map<string, Set<string>>();
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const set = methodsByPath.get(route.url) ?? new Set<string>();
    for (const m of methods) set.add(m);
    methodsByPath.set(route.url, set);
  });

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const apiError = toApiError(error, config.limits.bodyBytes);
    if (apiError.status >= 500 && !(error instanceof ApiError)) request.log.error({ err: error }, 'unhandled error');
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

  registerLivenessRoute(app, deps);
  void app.register(
    async (v1) => {
      registerStages(v1, v1Stages(deps));
      registerServiceRoutes(v1, deps);
      registerChatRoute(v1, deps);
      registerEmbeddingsRoute(v1, deps);
    },
    { prefix: '/v1' },
  );
  return app;
}
