// An in-process HTTP app with stand-in chat engines, for tests about the HTTP layer (not about an engine: the real
// llama.cpp engine has its own tests that run it for real).
import type { Test } from 'tap';
import { loadConfig, type ConfigFlags } from '../../daemon/config/index.js';
import { EngineRegistry, type ChatEngine } from '../../daemon/engines/index.js';
import { AuditService } from '../../daemon/audit/index.js';
import { buildApp, type PipelineDeps } from '../../daemon/http/index.js';
import { KeyRegistry } from '../../daemon/keys/index.js';
import { InFlightGate, KeyLimits } from '../../daemon/limits/index.js';
import { ModelCatalog } from '../../daemon/models/index.js';
import { openStore } from '../../daemon/store/index.js';
import { tempDir } from './daemon.js';

export interface StandInApp {
  baseURL: string;
  secret: string;
  /** The audit trail, when the app was started with one. */
  audit: AuditService | undefined;
}

/** Serves `engines` (model id → engine) on loopback over plain HTTP until the test ends. */
export async function startStandInApp(
  t: Test,
  engines: Record<string, { engine: ChatEngine; contextTokens?: number }>,
  flags: ConfigFlags = {},
  env: NodeJS.ProcessEnv = {},
  withAudit = false,
): Promise<StandInApp> {
  const dataDir = tempDir(t);
  const { config } = loadConfig({ dataDir, ...flags }, env);
  const store = openStore(dataDir);
  const keys = new KeyRegistry(store);
  keys.createProject('p');
  const { secret } = keys.createKey({ project: 'p', rpm: 100, tpm: 10_000 });
  const registry = new EngineRegistry();
  for (const [id, { engine }] of Object.entries(engines)) registry.set('chat', id, engine);
  const deps: PipelineDeps = {
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
  };
  const app = buildApp(deps, { logger: false });
  // As the daemon does: the audit trail exists before the /v1 routes are registered (when the app starts).
  const audit = withAudit
    ? await AuditService.open({ ...config, audit: { ...config.audit, signer: 'software' } }, store, app.log)
    : undefined;
  deps.audit = audit;
  // Plain HTTP on loopback whatever the posture: these tests are about the pipeline, not TLS.
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    await app.close();
    await audit?.close();
    await store.close();
  });
  const { port } = app.server.address() as { port: number };
  return { baseURL: `http://127.0.0.1:${port}/v1`, secret, audit };
}
