// Upstream boot: one connection pool and one health monitor per configured upstream, and each of its models routed to
// the engine for its capability. A model is listed by /v1/models only while its upstream's last health check answered
// and named it (an embeddings model also once its vector width is known); until then, or when the upstream stops
// answering or stops naming it, calls to it get 503 model_not_ready and health says why. A model id may name either a
// manifest model or an upstream one, never both: the start is refused otherwise.
import { readFileSync } from 'node:fs';
import type { FastifyBaseLogger } from 'fastify';
import type { Config, UpstreamConfig } from '../config/index.js';
import type { EngineRegistry } from '../engines/index.js';
import {
  UpstreamChatEngine,
  UpstreamClient,
  UpstreamEmbeddingEngine,
  UpstreamImageEngine,
  UpstreamMonitor,
  UpstreamTranscriptionEngine,
  type UpstreamEmbeddingRoute,
  type UpstreamRoute,
  type UpstreamStatus,
} from '../engines/upstream/index.js';
import type { UpstreamHealth } from '../health/index.js';
import type { Manifest, ModelCatalog } from '../models/index.js';

export const UPSTREAM_DEFAULTS = { connections: 64, timeoutMs: 120_000, retries: 2, healthIntervalMs: 5000 } as const;

export interface UpstreamsRuntime {
  /** Resolves once every upstream has had its first health check. */
  checked: Promise<void>;
  /** Each upstream's state, for /v1/health. */
  health(): UpstreamHealth[];
  /** Stops the health checks and the width learning. The engines, which hold the connections, stop through the registry. */
  close(): Promise<void>;
}

function readKey(file: string, index: number): string {
  let key: string;
  try {
    key = readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new Error(
      `cannot read upstreams[${index}].apiKeyFile '${file}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  if (!key || /\s/.test(key)) throw new Error(`upstreams[${index}].apiKeyFile '${file}' must hold one key on one line`);
  return key;
}

/**
 * Builds an engine per configured upstream and lists its models once its health check answers. Long on purpose: one
 * closure over the upstreams' clients and monitors, whose steps (build, check, list, close) share them.
 */
export function startUpstreams(options: {
  config: Config;
  manifest: Manifest;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  log: FastifyBaseLogger;
}): UpstreamsRuntime {
  const { config, manifest, catalog, engines, log } = options;
  const manifestIds = new Set(manifest.models.map((m) => m.id));
  for (const [i, upstream] of config.upstreams.entries()) {
    for (const model of upstream.models) {
      if (manifestIds.has(model.id)) {
        throw new Error(`upstreams[${i}] routes '${model.id}', which models-manifest.json also lists: give the upstream model another id`);
      }
    }
  }
  const chatRoutes = new Map<string, UpstreamRoute>();
  const embeddingRoutes = new Map<string, UpstreamEmbeddingRoute>();
  const transcriptionRoutes = new Map<string, UpstreamRoute>();
  const imageRoutes = new Map<string, UpstreamRoute>();
  const chat = new UpstreamChatEngine(chatRoutes, log);
  const embeddings = new UpstreamEmbeddingEngine(embeddingRoutes, log);
  const transcription = new UpstreamTranscriptionEngine(transcriptionRoutes, log);
  const images = new UpstreamImageEngine(imageRoutes, log);
  const created = Math.floor(Date.now() / 1000);
  const clients: UpstreamClient[] = [];
  const monitors: UpstreamMonitor[] = [];
  const monitorOf = new Map<string, UpstreamMonitor>();
  // An embeddings model whose vectors changed width (another model behind the same name) is withdrawn and learned
  // again at the next check.
  embeddings.onWidthChanged = (modelId) => {
    catalog.update(modelId, { readiness: 'loading', detail: 'its vectors changed width; learning it again' });
    monitorOf.get(modelId)?.checkSoon();
  };
  const closing = new AbortController();

  config.upstreams.forEach((upstream, i) => {
    const client = new UpstreamClient({
      name: upstream.name,
      baseUrl: upstream.baseUrl,
      ...(upstream.apiKeyFile ? { apiKey: readKey(upstream.apiKeyFile, i) } : {}),
      connections: upstream.connections ?? UPSTREAM_DEFAULTS.connections,
      timeoutMs: upstream.timeoutMs ?? UPSTREAM_DEFAULTS.timeoutMs,
      retries: upstream.retries ?? UPSTREAM_DEFAULTS.retries,
      queue: config.models.queue,
      policy: config.scheduling.policy,
    });
    clients.push(client);
    for (const model of upstream.models) {
      const route = { client, upstreamModel: model.upstreamModel ?? model.id };
      if (model.capability === 'chat') {
        chatRoutes.set(model.id, route);
        engines.set('chat', model.id, chat);
      } else if (model.capability === 'embeddings') {
        embeddingRoutes.set(model.id, { ...route, shortenable: model.shortenable ?? false });
        engines.set('embeddings', model.id, embeddings);
      } else if (model.capability === 'transcription') {
        transcriptionRoutes.set(model.id, route);
        engines.set('transcription', model.id, transcription);
      } else {
        imageRoutes.set(model.id, route);
        engines.set('image', model.id, images);
      }
      catalog.set({
        id: model.id,
        capability: model.capability,
        ownedBy: model.ownedBy ?? upstream.name,
        created,
        readiness: 'loading',
        detail: `waiting for the first health check of upstream '${upstream.name}'`,
        upstream: upstream.name,
        ...(upstream.frontier ? { frontier: true } : {}),
        ...(model.contextTokens ? { contextTokens: model.contextTokens } : {}),
      });
    }
    const learning = new Set<string>();
    // `monitor` is made just below; `current` reads its latest status once a width has been learned.
    const current = () => monitor.status;
    const follow = (status: UpstreamStatus) =>
      followStatus(upstream, status, { catalog, embeddings, learning, current, signal: closing.signal, log });
    const monitor = new UpstreamMonitor(
      client,
      upstream.healthIntervalMs ?? UPSTREAM_DEFAULTS.healthIntervalMs,
      client.timeoutMs,
      follow,
      log,
    );
    client.onUnreachable = () => monitor.checkSoon();
    for (const model of upstream.models) monitorOf.set(model.id, monitor);
    monitors.push(monitor);
    log.info({ upstream: upstream.name, models: upstream.models.length }, 'upstream routed');
  });
  const checked = Promise.all(monitors.map((m) => m.start())).then(() => {});
  return {
    checked,
    health: () =>
      monitors.map((monitor, i) => ({
        name: clients[i]!.name,
        answering: monitor.status.answering,
        problem: monitor.status.problem,
        checked_at: monitor.status.checkedAt ? new Date(monitor.status.checkedAt).toISOString() : null,
        retried: clients[i]!.retried,
      })),
    async close() {
      closing.abort();
      for (const monitor of monitors) monitor.stop();
    },
  };
}

/** Lists or withdraws the upstream's models after a health check. */
function followStatus(
  upstream: UpstreamConfig,
  status: UpstreamStatus,
  context: {
    catalog: ModelCatalog;
    embeddings: UpstreamEmbeddingEngine;
    learning: Set<string>;
    /** The upstream's latest status (a check may have ended while the width was being learned). */
    current: () => UpstreamStatus;
    signal: AbortSignal;
    log: FastifyBaseLogger;
  },
): void {
  const { catalog, embeddings, learning } = context;
  for (const model of upstream.models) {
    const name = model.upstreamModel ?? model.id;
    if (!status.answering) {
      catalog.update(model.id, { readiness: 'failed', detail: `upstream '${upstream.name}': ${status.problem}` });
    } else if (!status.served.has(name)) {
      catalog.update(model.id, { readiness: 'failed', detail: `upstream '${upstream.name}' does not list '${name}' now` });
    } else if (model.capability === 'embeddings' && !embeddings.knows(model.id)) {
      catalog.update(model.id, { readiness: 'loading', detail: 'learning the width of its vectors from the upstream' });
      if (learning.has(model.id)) continue;
      learning.add(model.id);
      embeddings
        .learn(model.id, AbortSignal.any([context.signal, AbortSignal.timeout(30_000)]))
        .then(
          () => {
            // Listed only if the upstream still answers and names it; otherwise the latest check has decided.
            const now = context.current();
            if (now.answering && now.served.has(name)) catalog.update(model.id, { readiness: 'ready' });
          },
          (err: Error) => {
            if (context.signal.aborted) return;
            context.log.warn(
              { upstream: upstream.name, model: model.id, err: err.message },
              'could not learn the width of an upstream embeddings model',
            );
            catalog.update(model.id, { readiness: 'failed', detail: `upstream '${upstream.name}' did not answer a test embedding` });
          },
        )
        .finally(() => learning.delete(model.id));
    } else {
      catalog.update(model.id, { readiness: 'ready' });
    }
  }
}
