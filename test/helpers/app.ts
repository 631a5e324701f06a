// An in-process HTTP app with stand-in chat engines, for tests about the HTTP layer (not about an engine: the real
// llama.cpp engine has its own tests that run it for real). Everything else is real, as the daemon composes it: the
// app cannot be built without its audit log, so every stand-in app records its calls in one (software signer).
import { join } from 'node:path';
import type { Test } from 'tap';
import { Accounts } from '../../daemon/accounts/index.js';
import { InternalCredentials } from '../../daemon/auth/index.js';
import { BatchStore, FileStore } from '../../daemon/batches/index.js';
import { AuditService } from '../../daemon/audit/index.js';
import { loadConfig, type ConfigFlags } from '../../daemon/config/index.js';
import { DocumentLibrary } from '../../daemon/documents/index.js';
import { EgressService } from '../../daemon/egress/index.js';
import { EngineRegistry, type ChatEngine } from '../../daemon/engines/index.js';
import { buildApp } from '../../daemon/http/index.js';
import { ImageFiles } from '../../daemon/images/index.js';
import { ResponseStore } from '../../daemon/responses/index.js';
import { KeyRegistry } from '../../daemon/keys/index.js';
import { InFlightGate, KeyLimits } from '../../daemon/limits/index.js';
import { createLogger } from '../../daemon/log/index.js';
import { ModelCatalog } from '../../daemon/models/index.js';
import { BootLog } from '../../daemon/service/boots.js';
import { openStore } from '../../daemon/store/index.js';
import { UsageMeter } from '../../daemon/usage/index.js';
import { AlertBook } from '../../daemon/alerts/index.js';
import { OperatorMetrics } from '../../daemon/metrics/index.js';
import { tempDir } from './daemon.js';

export interface StandInApp {
  baseURL: string;
  secret: string;
  /** The app's audit log. */
  audit: AuditService;
}

/**
 * A scripted chat engine for tests of the pipeline around an engine (not of an engine): it chats as the test says;
 * text completion, when the test gives none, is refused.
 */
export type ScriptedEngine = Omit<ChatEngine, 'complete'> & Partial<Pick<ChatEngine, 'complete'>>;

function scripted(engine: ScriptedEngine): ChatEngine {
  return {
    complete: () => Promise.reject(new Error('this scripted engine does not complete text')),
    ...engine,
    chat: engine.chat.bind(engine),
    close: engine.close.bind(engine),
  };
}

/** Serves `engines` (model id → engine) on loopback over plain HTTP until the test ends. */
export async function startStandInApp(
  t: Test,
  engines: Record<string, { engine: ScriptedEngine; contextTokens?: number }>,
  flags: ConfigFlags = {},
  env: NodeJS.ProcessEnv = {},
): Promise<StandInApp> {
  const dataDir = tempDir(t);
  const { config } = loadConfig({ dataDir, ...flags }, env);
  const store = openStore(dataDir);
  const log = createLogger(false);
  const keys = new KeyRegistry(store);
  await keys.createProject('p');
  const { secret } = await keys.createKey({ project: 'p', rpm: 100, tpm: 10_000 });
  const registry = new EngineRegistry();
  for (const [id, { engine }] of Object.entries(engines)) registry.set('chat', id, scripted(engine));
  const audit = await AuditService.open({ ...config, audit: { ...config.audit, signer: 'software' } }, store, log);
  const usage = new UsageMeter(store, () => {}, config.usage.billingDays);
  const metrics = new OperatorMetrics(store, { dataDir, queues: () => [] });
  const images = new ImageFiles(join(dataDir, 'images'), config.images.urlTtlSeconds * 1000, log);
  const responses = new ResponseStore(store, config.responses.ttlSeconds * 1000);
  const files = new FileStore(store, { ttlMs: config.files.ttlSeconds * 1000, maxBytesPerProject: config.files.maxBytesPerProject });
  const app = buildApp(
    {
      config,
      keys,
      limits: new KeyLimits(),
      gate: new InFlightGate(10),
      catalog: new ModelCatalog(
        Object.entries(engines).map(([id, { contextTokens }]) => ({
          id,
          capability: 'chat' as const,
          ownedBy: 'test',
          created: 0,
          readiness: 'ready' as const,
          ...(contextTokens ? { contextTokens } : {}),
        })),
      ),
      engines: registry,
      state: { draining: false, startedAt: Date.now() },
      fixedHeaders: { 'X-Region': config.region, 'X-Sovereign': 'true' },
      audit,
      usage,
      metrics,
      alerts: new AlertBook({ thresholds: config.alerts, disk: () => null, prometheusProblem: () => null }, log),
      accounts: new Accounts(store),
      store,
      documents: new DocumentLibrary(store, {
        chunksPerDocument: config.documents.maxChunksPerDocument,
        documentsPerKnowledgeBase: config.documents.maxDocumentsPerKnowledgeBase,
        vectorsDir: join(dataDir, 'vectors'),
        log,
        pdf: config.documents.pdf,
      }),
      images,
      responses,
      files,
      batches: new BatchStore(store, files),
      credentials: new InternalCredentials(keys),
      // Not started: no guard is installed in the test's own process.
      egress: new EgressService(config, store, log, () => {}),
      boots: new BootLog(store).report,
      upstreams: { health: () => [] },
    },
    { log },
  );
  // Plain HTTP on loopback whatever the posture: these tests are about the pipeline, not TLS.
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    await app.close();
    images.close();
    responses.close();
    await usage.close();
    await metrics.close();
    await audit.close();
    await store.close();
  });
  const { port } = app.server.address() as { port: number };
  return { baseURL: `http://127.0.0.1:${port}/v1`, secret, audit };
}
