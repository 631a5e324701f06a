// Model boot: after the server listens, verify the manifest's files, decide what fits, and load (at boot or on
// first call). Until a model is verified and loaded its calls get 503 model_not_ready; a model that fails to load
// is withdrawn and health says why. llama.cpp itself starts only if there is a model file for it to run.
import { existsSync, statSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import type { Llama } from 'node-llama-cpp';
import { chatSequences, modelsDir as modelsDirOf, type Config } from '../config/index.js';
import type { EngineRegistry } from '../engines/index.js';
import type { LlamaEngine } from '../engines/llama/engine.js';
import type { WhisperEngine } from '../engines/whisper/engine.js';
import { inferenceThreads, probeHardware, type HardwareFacts } from '../hardware/index.js';
import {
  assessModels,
  demoRefusal,
  ModelVerifier,
  ownedByOf,
  fileIdentity,
  openModelFile,
  type Availability,
  servingContextOf,
  type Manifest,
  type ManifestEntry,
  type ModelCatalog,
  type ModelEventListener,
  type ModelStatus,
} from '../models/index.js';
import { fingerprint, watchModelsDir, type ModelsDirWatch } from './model-watch.js';
import type { Store } from '../store/index.js';

export interface ModelsRuntime {
  /** Resolves when every listed model is loaded (boot) or ready to load (on-demand). */
  settled: Promise<void>;
  statuses(): ModelStatus[];
  hardware(): HardwareFacts | null;
  dispose(): Promise<void>;
}

/** How a listed model's file differs from the one verified. */
interface FileChange {
  state: Availability;
  reason: string;
}

/**
 * A listed model's `created` (its file's mtime). The file may be gone by the time it is listed (removed after its
 * checks, while later entries were checked): that is for its load or the next look to find, not a reason to list
 * nothing.
 */
function createdOf(path: string): number {
  try {
    return Math.floor(statSync(path).mtimeMs / 1000);
  } catch {
    return 0;
  }
}

export const BUILT_IN_ENGINES = new Set(['llama.cpp', 'whisper.cpp'] as const);

/**
 * Verifies, lists and loads the manifest's local models, then keeps them in step with the models directory. Long on
 * purpose: one closure over the runtime's state (the statuses, what is loaded, retired and held open, the watcher),
 * whose steps are the named functions inside it; each step reads and changes that state, which split functions would
 * pass back and forth.
 */
export function startModels(options: {
  config: Config;
  manifest: Manifest;
  store: Store;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  log: FastifyBaseLogger;
  /** Told when a model is listed, not listed, or withdrawn (for the audit log). */
  onEvent?: ModelEventListener;
}): ModelsRuntime {
  const { config, manifest, catalog, engines, log } = options;
  const dir = modelsDirOf(config);
  const threads = inferenceThreads(config.models.threads);
  let statuses: ModelStatus[] = [];
  let hardware: HardwareFacts | null = null;
  let disposed = false;

  // Files that are present are 'loading' (being verified) from the first moment, so calls get 503, not 404. A demo
  // model this posture never serves is not among them: it is never listed, not even as loading.
  const candidates = manifest.models.filter(
    (e) => BUILT_IN_ENGINES.has(e.engine) && demoRefusal(e, config.posture) === null && existsSync(join(dir, e.file)),
  );
  for (const entry of candidates) {
    catalog.set({
      id: entry.id,
      capability: entry.capability,
      ownedBy: ownedByOf(entry),
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
      ([l, m]) =>
        new m.LlamaEngine(l, {
          threads,
          parallel: config.models.parallel,
          embeddingContexts: config.models.embeddingContexts,
          queue: config.models.queue,
          gpu: config.models.gpu,
          policy: config.scheduling.policy,
        }),
    ));

  // whisper.cpp's binding loads only when a transcription model is there to run.
  let whisperCpp: Promise<WhisperEngine> | undefined;
  const whisperEngine = () =>
    (whisperCpp ??= import('../engines/whisper/engine.js').then(
      (m) =>
        new m.WhisperEngine({
          threads,
          queue: config.models.queue,
          gpu: config.models.gpu !== 'off',
          windowTimeoutMs: 10 * 60_000,
          policy: config.scheduling.policy,
          log: (level, line) => log[level]({ engine: 'whisper.cpp' }, line),
        }),
    ));

  const load = async (entry: ManifestEntry, path: string) => {
    catalog.update(entry.id, { readiness: 'loading', detail: 'loading weights' });
    // On demand, a model loads at its first call, maybe long after it was verified: the file must still be that one.
    const changed = await changedSinceVerified(entry, path);
    if (disposed) return;
    if (changed) return fileChanged(entry, changed, 'load');
    // The engine opens the file that was just verified, through our handle, not whatever the path names by the time
    // it opens it (a symlink or a rename can point it elsewhere in between).
    let file: FileHandle;
    try {
      file = await openModelFile(path);
    } catch (err) {
      const gone = ['absent', 'not-a-file'].includes(fingerprint(path));
      const reason = `${entry.file} changed after it was verified and cannot be read: ${(err as Error).message}`;
      return fileChanged(entry, { state: gone ? 'missing' : 'unreadable', reason }, 'load');
    }
    const verifiedAs = assessedAs.get(entry.id);
    const stillVerified = async () => fileIdentity(await file.stat({ bigint: true })) === verifiedAs;
    if (!(await stillVerified())) {
      await file.close();
      return fileChanged(entry, { state: 'checksum_mismatch', reason: `${entry.file} changed as it was about to be loaded` }, 'load');
    }
    // Kept open while the model is loaded: the engine may open its path again.
    handles.push(file);
    const source = existsSync(`/proc/self/fd/${file.fd}`) ? `/proc/self/fd/${file.fd}` : path;
    loaded.add(entry.id);
    const started = Date.now();
    /** A write into the file while the engine read it (same inode, new ctime) may be in the weights it holds. */
    const changedWhileLoading = async () => {
      if (await stillVerified()) return false;
      fileChanged(entry, { state: 'checksum_mismatch', reason: `${entry.file} changed while it was being loaded` }, 'load');
      return true;
    };
    try {
      if (entry.engine === 'whisper.cpp') {
        const engine = await whisperEngine();
        await engine.load(entry, source);
        if (disposed || (await changedWhileLoading())) return;
        engines.set('transcription', entry.id, engine);
        catalog.update(entry.id, { readiness: 'ready' });
        log.info({ model: entry.id, ms: Date.now() - started }, 'model ready');
        return;
      }
      const llamaCpp = await llamaEngine();
      await llamaCpp.load(entry, source);
      if (disposed || (await changedWhileLoading())) return;
      if (entry.capability === 'chat') engines.set('chat', entry.id, llamaCpp);
      else engines.set('embeddings', entry.id, llamaCpp);
      catalog.update(entry.id, { readiness: 'ready' });
      log.info({ model: entry.id, ms: Date.now() - started }, 'model ready');
    } catch (err) {
      catalog.update(entry.id, { readiness: 'failed', detail: `failed to load: ${(err as Error).message}` });
      options.onEvent?.({
        type: 'model.withdrawn',
        id: entry.id,
        state: 'failed',
        reason: `failed to load: ${(err as Error).message}`,
        when: 'load',
      });
      log.error({ model: entry.id, err: (err as Error).message }, 'model failed to load; withdrawn');
    }
  };

  const verifier = new ModelVerifier(options.store);
  const assess = (entries: ManifestEntry[], reservedBytes: number) =>
    assessModels({
      manifest: { models: entries },
      modelsDir: dir,
      verifier,
      llama: runtime,
      hardware: hardware!,
      headroomBytes: config.models.headroomBytes,
      reservedBytes,
      parallel: chatSequences(config),
      embeddingContexts: config.models.embeddingContexts,
      engines: BUILT_IN_ENGINES,
      posture: config.posture,
      onHashProgress: (id) => (done, total) => log.info({ model: id, done, total }, `verifying ${Math.round((done / total) * 100)}%`),
    });
  const entryOf = (id: string) => manifest.models.find((m) => m.id === id)!;
  /** Each entry's file as it was when it was last assessed: a rescan looks again only at files that changed. */
  const assessedAs = new Map<string, string>();
  const seenAs = new Map<string, string>();
  /** The checksum each listed model was verified against: what it serves. */
  const listedWith = new Map<string, string | null>();
  /** Wakes rescans; none when models.rescanSeconds is 0 (models are looked at only at boot). */
  let watcher: ModelsDirWatch | undefined;
  /** Models whose engine has loaded (or is loading) them: their weights stay in memory until the daemon stops. */
  const loaded = new Set<string>();
  /** Loaded models withdrawn because their file changed: listed again only after a restart, whose RAM they still hold. */
  const retired = new Set<string>();
  /** The files the engines were given (as /proc/self/fd paths), open until the daemon stops. */
  const handles: FileHandle[] = [];

  const unavailableOf = (all: ModelStatus[]) =>
    all.filter((s) => s.state !== 'available').map((s) => ({ id: s.id, capability: s.capability, state: s.state, reason: s.reason }));

  /**
   * Why a listed model's file is no longer the one it was verified as, or null when it still is: unchanged since
   * (the same stat), or read again to the checksum it was listed with (chmod, touch or a copy of the same bytes
   * change the stat, not the model).
   */
  const changedSinceVerified = async (entry: ManifestEntry, path: string): Promise<FileChange | null> => {
    const before = fingerprint(path);
    if (before === assessedAs.get(entry.id)) return null;
    if (before === 'absent' || before === 'not-a-file')
      return { state: 'missing', reason: `${entry.file} was removed after it was verified` };
    const expected = listedWith.get(entry.id) ?? null;
    let sha256: string;
    let identity: string | null;
    try {
      ({ sha256, identity } = await verifier.sha256(path));
    } catch (err) {
      return { state: 'unreadable', reason: `${entry.file} changed after it was verified and cannot be read: ${(err as Error).message}` };
    }
    // `identity` is the file whose bytes were hashed (null if they changed meanwhile): the one a load must find.
    if (expected !== null && sha256 === expected && identity !== null) {
      assessedAs.set(entry.id, identity);
      seenAs.set(entry.id, identity);
      return null;
    }
    return {
      state: 'checksum_mismatch',
      reason: `${entry.file} changed after it was verified (SHA-256 ${sha256}, verified as ${expected ?? 'none'})`,
    };
  };

  /**
   * A listed model whose file changed. One not loaded yet is verified again, like a file that arrives (503 meanwhile);
   * a loaded one, whose engine holds the weights it verified and cannot swap them, and one whose file is gone, are
   * withdrawn until a restart verifies and serves the file.
   */
  const fileChanged = (entry: ManifestEntry, change: FileChange, when: 'load' | 'rescan') => {
    statuses = statuses.map((s) => (s.id === entry.id ? { ...s, state: change.state, reason: change.reason } : s));
    if (!loaded.has(entry.id) && change.state !== 'missing' && watcher) {
      catalog.update(entry.id, { readiness: 'loading', detail: 'its file changed after it was verified; verifying it again' });
      log.warn({ model: entry.id, reason: change.reason }, 'model file changed; verifying it again');
      watcher.wake();
      return;
    }
    if (loaded.has(entry.id)) retired.add(entry.id);
    const reason = `${change.reason}; restart the daemon to verify and serve the file`;
    statuses = statuses.map((s) => (s.id === entry.id ? { ...s, reason } : s));
    catalog.remove(entry.id);
    catalog.setUnavailable(unavailableOf(statuses));
    log.warn({ model: entry.id, state: change.state, reason }, 'model withdrawn');
    options.onEvent?.({ type: 'model.withdrawn', id: entry.id, state: change.state, reason, when });
  };

  /** Lists what `fresh` found available and reports the rest; returns the newly listed models' entries. */
  const publish = (fresh: ModelStatus[], when: 'boot' | 'rescan') => {
    const byId = new Map(fresh.map((s) => [s.id, s]));
    statuses = statuses.length ? statuses.map((s) => byId.get(s.id) ?? s) : fresh;
    catalog.setUnavailable(unavailableOf(statuses));
    const admitted: Array<{ s: ModelStatus; entry: ManifestEntry }> = [];
    for (const s of fresh) {
      const entry = entryOf(s.id);
      if (s.state !== 'available') {
        catalog.remove(s.id);
        // A file that is not there is not news (missing, or a demo model this posture would not serve anyway).
        if (s.present) {
          log.warn({ model: s.id, state: s.state, reason: s.reason }, 'model not listed');
          options.onEvent?.({ type: 'model.not_listed', id: s.id, state: s.state, reason: s.reason, when });
        }
        continue;
      }
      let loading: Promise<void> | undefined;
      catalog.set({
        id: entry.id,
        capability: entry.capability,
        ownedBy: ownedByOf(entry),
        created: createdOf(s.path),
        contextTokens: servingContextOf(entry),
        readiness: config.models.load === 'boot' ? 'loading' : 'unloaded',
        load: () => void (loading ??= load(entry, s.path)),
      });
      admitted.push({ s, entry });
    }
    // The checksum each listed file was verified against: the manifest's, or the one pinned when it was imported.
    const served = admitted.map(({ s, entry }) => ({
      id: s.id,
      file: entry.file,
      sha256: entry.sha256 ?? verifier.pin(s.id)?.sha256 ?? null,
    }));
    for (const model of served) listedWith.set(model.id, model.sha256);
    if (when === 'boot') options.onEvent?.({ type: 'models.served', models: served });
    else {
      for (const model of served) {
        log.info({ model: model.id }, 'model arrived in the models dir; listed');
        options.onEvent?.({ type: 'model.listed', ...model });
      }
    }
    return admitted;
  };

  const settled = (async () => {
    hardware = await probeHardware(candidates.length ? await runtime() : null);
    log.info(
      { ram: hardware.ram, cores: hardware.cpu.cores, gpus: hardware.gpus.length, accelerator: hardware.accelerator, threads },
      'hardware probed',
    );
    for (const entry of manifest.models) assessedAs.set(entry.id, fingerprint(join(dir, entry.file)));
    const available = publish(await assess(manifest.models, 0), 'boot');
    for (const [id, fp] of assessedAs) seenAs.set(id, fp);
    if (config.models.load === 'boot') for (const { s, entry } of available) await load(entry, s.path);
  })().catch((err: unknown) => {
    log.error({ err: (err as Error).message }, 'model boot failed; no model is served');
    for (const m of catalog.all()) catalog.update(m.id, { readiness: 'failed', detail: `model boot failed: ${(err as Error).message}` });
  });

  /**
   * Looks again at the entries not listed whose file changed since they were assessed, once the file has stopped
   * changing (the same stat at two scans in a row), through the same checks as at boot. A model imported by
   * `sovereign models import` appears whole (it is renamed into place); one copied in by hand is looked at once the
   * copy is over, and a file still short of its size or checksum is not listed. First, the listed models whose file
   * changed are taken out of service (fileChanged).
   */
  const rescan = async () => {
    if (disposed || !hardware) return;
    for (const s of statuses) {
      if (s.state !== 'available' || !catalog.all().some((m) => m.id === s.id)) continue;
      const change = await changedSinceVerified(entryOf(s.id), s.path);
      if (disposed) return;
      if (change) fileChanged(entryOf(s.id), change, 'rescan');
    }
    const due: ManifestEntry[] = [];
    let settling = false;
    for (const s of statuses) {
      // Neither a file nor a change to it makes a build gain an engine or a demo model servable on this posture.
      if (s.state === 'available' || s.state === 'engine_unavailable' || s.state === 'demo_model' || retired.has(s.id)) continue;
      const fp = fingerprint(s.path);
      if (fp !== seenAs.get(s.id)) {
        seenAs.set(s.id, fp);
        settling ||= fp !== assessedAs.get(s.id);
      } else if (fp !== assessedAs.get(s.id)) {
        assessedAs.set(s.id, fp);
        due.push(entryOf(s.id));
      }
    }
    if (settling) watcher?.wake();
    if (!due.length) return;
    // Models listed so far keep what they were promised; manifest order decides only among models assessed together.
    const reserved = statuses
      .filter((s) => s.state === 'available' || retired.has(s.id))
      .reduce((sum, s) => sum + (s.requiredRamBytes ?? 0), 0);
    const available = publish(await assess(due, reserved), 'rescan');
    if (config.models.load === 'boot') for (const { s, entry } of available) if (!disposed) await load(entry, s.path);
  };
  if (config.models.rescanSeconds > 0) {
    void settled.then(() => {
      if (disposed) return;
      watcher = watchModelsDir(dir, { pollMs: config.models.rescanSeconds * 1000, debounceMs: 500, scan: rescan });
    });
  }

  return {
    settled,
    statuses: () => statuses,
    hardware: () => hardware,
    async dispose() {
      disposed = true;
      await settled;
      await watcher?.close();
      // Its engines stop before the files close; and here, not only through the registry: a load that ended after
      // the shutdown began left its model in an engine that may serve no routed model.
      await (await engine)?.close();
      await (await whisperCpp)?.close();
      await Promise.all(handles.map((h) => h.close()));
    },
  };
}
