// Model boot: after the server listens, verify the manifest's files, decide what fits, and load (at boot or on
// first call). Until a model is verified and loaded its calls get 503 model_not_ready; a model that fails to load
// is withdrawn and health says why.
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import { modelsDir as modelsDirOf, type Config } from '../config/index.js';
import type { EngineRegistry } from '../engines/index.js';
import { LlamaEngine } from '../engines/llama/engine.js';
import { llamaRuntime } from '../engines/llama/runtime.js';
import { inferenceThreads, probeHardware, type HardwareFacts } from '../hardware/index.js';
import { assessModels, ModelVerifier, type Manifest, type ManifestEntry, type ModelCatalog, type ModelStatus } from '../models/index.js';
import type { Store } from '../store/index.js';

export interface ModelsRuntime {
  /** Resolves when every listed model is loaded (boot) or ready to load (on-demand). */
  settled: Promise<void>;
  statuses(): ModelStatus[];
  hardware(): HardwareFacts | null;
  dispose(): Promise<void>;
}

export const BUILT_IN_ENGINES = new Set(['llama.cpp'] as const);

export function startModels(options: {
  config: Config;
  manifest: Manifest;
  store: Store;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  log: FastifyBaseLogger;
}): ModelsRuntime {
  const { config, manifest, catalog, engines, log } = options;
  const dir = modelsDirOf(config);
  const threads = inferenceThreads(config.models.threads);
  let statuses: ModelStatus[] = [];
  let hardware: HardwareFacts | null = null;
  let engine: LlamaEngine | null = null;
  let disposed = false;

  // Files that are present are 'loading' (being verified) from the first moment, so calls get 503, not 404.
  for (const entry of manifest.models) {
    if (BUILT_IN_ENGINES.has(entry.engine as 'llama.cpp') && existsSync(join(dir, entry.file))) {
      catalog.set({ id: entry.id, capability: entry.capability, ownedBy: entry.ownedBy, created: 0, readiness: 'loading', detail: 'verifying' });
    }
  }

  const load = async (entry: ManifestEntry, path: string) => {
    catalog.update(entry.id, { readiness: 'loading', detail: 'loading weights' });
    const started = Date.now();
    try {
      await engine!.load(entry, path);
      if (disposed) return;
      if (entry.capability === 'chat') engines.setChat(entry.id, engine!);
      else engines.setEmbeddings(entry.id, engine!);
      catalog.update(entry.id, { readiness: 'ready' });
      log.info({ model: entry.id, ms: Date.now() - started }, 'model ready');
    } catch (err) {
      catalog.update(entry.id, { readiness: 'failed', detail: `failed to load: ${(err as Error).message}` });
      log.error({ model: entry.id, err: (err as Error).message }, 'model failed to load; withdrawn');
    }
  };

  const settled = (async () => {
    const llama = await llamaRuntime({ gpu: config.models.gpu, threads, log: (level, message) => log[level]({ engine: 'llama.cpp' }, message) });
    engine = new LlamaEngine(llama, { threads, parallel: config.models.parallel, queue: config.models.queue, gpu: config.models.gpu });
    hardware = await probeHardware(llama);
    log.info({ ram: hardware.ram, cores: hardware.cpu.cores, gpus: hardware.gpus.length, accelerator: hardware.accelerator, threads }, 'hardware probed');
    statuses = await assessModels({
      manifest,
      modelsDir: dir,
      verifier: new ModelVerifier(options.store),
      llama,
      hardware,
      headroomBytes: config.models.headroomBytes,
      parallel: config.models.parallel,
      engines: BUILT_IN_ENGINES,
      onHashProgress: (id) => (done, total) => log.info({ model: id, done, total }, `verifying ${Math.round((done / total) * 100)}%`),
    });
    catalog.setUnavailable(statuses.filter((s) => s.state !== 'available').map((s) => ({ id: s.id, capability: s.capability, state: s.state, reason: s.reason })));
    for (const s of statuses) {
      if (s.state !== 'available') {
        catalog.remove(s.id);
        log.warn({ model: s.id, state: s.state, reason: s.reason }, 'model not listed');
      }
    }
    const available = statuses.filter((s) => s.state === 'available');
    for (const s of available) {
      const entry = manifest.models.find((m) => m.id === s.id)!;
      const created = Math.floor(statSync(s.path).mtimeMs / 1000);
      let loading: Promise<void> | undefined;
      catalog.set({
        id: entry.id,
        capability: entry.capability,
        ownedBy: entry.ownedBy,
        created,
        readiness: config.models.load === 'boot' ? 'loading' : 'unloaded',
        load: () => void (loading ??= load(entry, s.path)),
      });
    }
    if (config.models.load === 'boot') for (const s of available) await load(manifest.models.find((m) => m.id === s.id)!, s.path);
  })().catch((err: unknown) => {
    log.error({ err: (err as Error).message }, 'model boot failed; no model is served');
    for (const m of catalog.all()) catalog.update(m.id, { readiness: 'failed', detail: `model boot failed: ${(err as Error).message}` });
  });

  return {
    settled,
    statuses: () => statuses,
    hardware: () => hardware,
    async dispose() {
      disposed = true;
      await settled;
      await engine?.dispose();
    },
  };
}
