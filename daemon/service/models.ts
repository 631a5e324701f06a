// Model boot: after the server listens, verify the manifest's files, decide what fits, and load (at boot or on
// first call). Until a model is verified and loaded its calls get 503 model_not_ready; a model that fails to load
// is withdrawn and health says why. llama.cpp itself starts only if there is a model file for it to run.
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import type { Llama } from 'node-llama-cpp';
import { modelsDir as modelsDirOf, type Config } from '../config/index.js';
import type { EngineRegistry } from '../engines/index.js';
import type { LlamaEngine } from '../engines/llama/engine.js';
import type { WhisperEngine } from '../engines/whisper/engine.js';
import { inferenceThreads, probeHardware, type HardwareFacts } from '../hardware/index.js';
import {
  assessModels,
  ModelVerifier,
  servingContextOf,
  type Manifest,
  type ManifestEntry,
  type ModelCatalog,
  type ModelStatus,
} from '../models/index.js';
import type { EntryFields } from '../audit/index.js';
import type { Store } from '../store/index.js';

export interface ModelsRuntime {
  /** Resolves when every listed model is loaded (boot) or ready to load (on-demand). */
  settled: Promise<void>;
  statuses(): ModelStatus[];
  hardware(): HardwareFacts | null;
  dispose(): Promise<void>;
}

export const BUILT_IN_ENGINES = new Set(['llama.cpp', 'whisper.cpp'] as const);

export function startModels(options: {
  config: Config;
  manifest: Manifest;
  store: Store;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  log: FastifyBaseLogger;
  /** Writes an audit entry (the models served, with their verified digests; a model withdrawn and why). */
  record?: (kind: 'boot.models' | 'model.withdrawn', fields: EntryFields) => void;
}): ModelsRuntime {
  const { config, manifest, catalog, engines, log } = options;
  const record = options.record ?? (() => {});
  const dir = modelsDirOf(config);
  const threads = inferenceThreads(config.models.threads);
  let statuses: ModelStatus[] = [];
  let hardware: HardwareFacts | null = null;
  let disposed = false;

  // Files that are present are 'loading' (being verified) from the first moment, so calls get 503, not 404.
  const candidates = manifest.models.filter((e) => BUILT_IN_ENGINES.has(e.engine) && existsSync(join(dir, e.file)));
  for (const entry of candidates) {
    catalog.set({
      id: entry.id,
      capability: entry.capability,
      ownedBy: entry.ownedBy,
      created: 0,
      readiness: 'loading',
      detail: 'verifying',
    });
  }

  let llama: Promise<Llama> | undefined;
  const runtime = () =>
    (llama ??= import('../engines/llama/runtime.js').then((m) =>
      m.llamaRuntime({
        gpu: config.models.gpu,
        threads,
        log: (level, message) => log[level]({ engine: 'llama.cpp' }, message),
      }),
    ));
  let engine: Promise<LlamaEngine> | undefined;
  const llamaEngine = () =>
    (engine ??= Promise.all([runtime(), import('../engines/llama/engine.js')]).then(
      ([l, m]) => new m.LlamaEngine(l, { threads, parallel: config.models.parallel, queue: config.models.queue, gpu: config.models.gpu }),
    ));

  // whisper.cpp's binding loads only when a transcription model is there to run.
  let whisperCpp: Promise<WhisperEngine> | undefined;
  const whisperEngine = () =>
    (whisperCpp ??= import('../engines/whisper/engine.js').then(
      (m) => new m.WhisperEngine({ threads, queue: config.models.queue, gpu: config.models.gpu !== 'off', windowTimeoutMs: 10 * 60_000 }),
    ));

  const load = async (entry: ManifestEntry, path: string) => {
    catalog.update(entry.id, { readiness: 'loading', detail: 'loading weights' });
    const started = Date.now();
    try {
      if (entry.engine === 'whisper.cpp') {
        const engine = await whisperEngine();
        await engine.load(entry, path);
        if (disposed) return;
        engines.setTranscription(entry.id, engine);
        catalog.update(entry.id, { readiness: 'ready' });
        log.info({ model: entry.id, ms: Date.now() - started }, 'model ready');
        return;
      }
      const llamaCpp = await llamaEngine();
      await llamaCpp.load(entry, path);
      if (disposed) return;
      if (entry.capability === 'chat') engines.setChat(entry.id, llamaCpp);
      else engines.setEmbeddings(entry.id, llamaCpp);
      catalog.update(entry.id, { readiness: 'ready' });
      log.info({ model: entry.id, ms: Date.now() - started }, 'model ready');
    } catch (err) {
      catalog.update(entry.id, { readiness: 'failed', detail: `failed to load: ${(err as Error).message}` });
      record('model.withdrawn', { model: entry.id, state: 'failed', reason: `failed to load: ${(err as Error).message}` });
      log.error({ model: entry.id, err: (err as Error).message }, 'model failed to load; withdrawn');
    }
  };

  const settled = (async () => {
    hardware = await probeHardware(candidates.length ? await runtime() : null);
    log.info(
      { ram: hardware.ram, cores: hardware.cpu.cores, gpus: hardware.gpus.length, accelerator: hardware.accelerator, threads },
      'hardware probed',
    );
    const verifier = new ModelVerifier(options.store);
    statuses = await assessModels({
      manifest,
      modelsDir: dir,
      verifier,
      llama: runtime,
      hardware,
      headroomBytes: config.models.headroomBytes,
      parallel: config.models.parallel,
      engines: BUILT_IN_ENGINES,
      onHashProgress: (id) => (done, total) => log.info({ model: id, done, total }, `verifying ${Math.round((done / total) * 100)}%`),
    });
    const unavailable = statuses.filter((s) => s.state !== 'available');
    catalog.setUnavailable(unavailable.map((s) => ({ id: s.id, capability: s.capability, state: s.state, reason: s.reason })));
    for (const s of unavailable) {
      catalog.remove(s.id);
      if (s.state !== 'missing') log.warn({ model: s.id, state: s.state, reason: s.reason }, 'model not listed');
      // A file that is there but not served is withdrawn; a file never brought is not news.
      if (s.state !== 'missing') record('model.withdrawn', { model: s.id, state: s.state, reason: s.reason });
    }
    const available = statuses
      .filter((s) => s.state === 'available')
      .map((s) => ({ s, entry: manifest.models.find((m) => m.id === s.id)! }));
    // The checksum each served file was verified against: the manifest's, or the one pinned when it was imported.
    record('boot.models', {
      models: available.map(({ s, entry }) => ({
        model: s.id,
        file: entry.file,
        sha256: entry.sha256 ?? verifier.pin(entry.id)?.sha256 ?? null,
      })),
    });
    for (const { s, entry } of available) {
      let loading: Promise<void> | undefined;
      catalog.set({
        id: entry.id,
        capability: entry.capability,
        ownedBy: entry.ownedBy,
        created: Math.floor(statSync(s.path).mtimeMs / 1000),
        contextTokens: servingContextOf(entry),
        readiness: config.models.load === 'boot' ? 'loading' : 'unloaded',
        load: () => void (loading ??= load(entry, s.path)),
      });
    }
    if (config.models.load === 'boot') for (const { s, entry } of available) await load(entry, s.path);
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
      await (await engine)?.dispose();
      await (await whisperCpp)?.dispose();
    },
  };
}
