// Upstream boot: one connection pool per configured upstream, and each of its models listed and routed to it. A
// model id may name either a manifest model or an upstream one, never both: the start is refused otherwise.
import { readFileSync } from 'node:fs';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../config/index.js';
import type { EngineRegistry } from '../engines/index.js';
import { UpstreamChatEngine, UpstreamClient, type UpstreamRoute } from '../engines/upstream/index.js';
import type { Manifest, ModelCatalog } from '../models/index.js';

export const UPSTREAM_DEFAULTS = { connections: 64, timeoutMs: 120_000 } as const;

export interface UpstreamsRuntime {
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
  const clients = config.upstreams.map(
    (upstream, i) =>
      new UpstreamClient({
        name: upstream.name,
        baseUrl: upstream.baseUrl,
        ...(upstream.apiKeyFile ? { apiKey: readKey(upstream.apiKeyFile, i) } : {}),
        connections: upstream.connections ?? UPSTREAM_DEFAULTS.connections,
        timeoutMs: upstream.timeoutMs ?? UPSTREAM_DEFAULTS.timeoutMs,
      }),
  );
  const routes = new Map<string, UpstreamRoute>();
  const engine = new UpstreamChatEngine(routes, log);
  const created = Math.floor(Date.now() / 1000);
  config.upstreams.forEach((upstream, i) => {
    for (const model of upstream.models) {
      routes.set(model.id, { client: clients[i]!, upstreamModel: model.upstreamModel ?? model.id });
      engines.setChat(model.id, engine);
      catalog.set({
        id: model.id,
        capability: model.capability,
        ownedBy: model.ownedBy ?? upstream.name,
        created,
        readiness: 'ready',
        upstream: upstream.name,
        ...(model.contextTokens ? { contextTokens: model.contextTokens } : {}),
      });
    }
    log.info({ upstream: upstream.name, models: upstream.models.length }, 'upstream routed');
  });
  return {
    async close() {
      await Promise.all(clients.map((c) => c.close()));
    },
  };
}
