// The composition root: opens the stores, builds the engines' registry and the HTTP app, listens, and drains on
// close. Everything a running daemon holds is created here and released by close().
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyBaseLogger as Logger, FastifyInstance, FastifyServerOptions } from 'fastify';
import { isSovereign, listenHost, manifestPath, prometheusEnabled, usesTls, type Config } from '../config/index.js';
import { AlertBook } from '../alerts/index.js';
import { healthReport } from '../health/index.js';
import { OperatorMetrics } from '../metrics/index.js';
import { startPrometheus, type PrometheusListener } from '../prometheus/index.js';
import { EngineRegistry } from '../engines/index.js';
import { AuditService, type EntryFields, type EntryKind } from '../audit/index.js';
import { DocumentLibrary } from '../documents/index.js';
import { buildApp, inProcessCaller, stopSchemaChecks, type DaemonState } from '../http/index.js';
import { InternalCredentials } from '../auth/index.js';
import { BatchLeases, BatchRunner, BatchStore, FileStore } from '../batches/index.js';
import { KeyRegistry } from '../keys/index.js';
import { Accounts } from '../accounts/index.js';
import { UsageMeter } from '../usage/index.js';
import { InFlightGate, KeyLimits, MemoryLimitStore, RedisLimitStore, shareSizes, type LimitStore } from '../limits/index.js';
import { createLogger, loggerOptions } from '../log/index.js';
import { loadManifest, ModelCatalog, type ModelEvent } from '../models/index.js';
import { scannerKind, stopScrubWorker } from '../scrub/index.js';
import { absorbCommitFailures, connectShared, openStore } from '../store/index.js';
import { EgressService } from '../egress/index.js';
import { AuditEvents } from './audit-events.js';
import { BootLog } from './boots.js';
import { lockDataDir } from './lock.js';
import { passedListenFd, systemdNotifier } from './systemd.js';
import { startModels, type ModelsRuntime } from './models.js';
import { ImageFiles } from '../images/index.js';
import { ResponseStore } from '../responses/index.js';
import { startUpstreams, type UpstreamsRuntime } from './upstreams.js';

export interface Daemon {
  /** Base URL clients use, e.g. http://127.0.0.1:8443/v1. */
  readonly url: string;
  readonly app: FastifyInstance;
  readonly models: ModelsRuntime;
  /** Stops accepting calls, lets in-flight ones finish (up to timeouts.shutdownGraceMs), then releases everything. */
  close(): Promise<{ drained: boolean }>;
}

function readTls(config: Config): { cert: Buffer; key: Buffer } | undefined {
  if (!usesTls(config.posture)) return undefined;
  if (!config.tls) throw new Error(`the ${config.posture} posture needs tls.cert and tls.key`);
  const read = (what: 'cert' | 'key') => {
    const path = config.tls![what];
    try {
      return readFileSync(path);
    } catch (err) {
      throw new Error(`cannot read tls.${what} '${path}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  return { cert: read('cert'), key: read('key') };
}

/**
 * Opens every part of the daemon, in the order each needs the ones before it, and returns what close() releases in
 * reverse. Long on purpose: it is the one place that composes the parts, read top to bottom; split, every part would
 * travel through parameters to the next piece.
 */
export async function startDaemon(
  config: Config,
  logger: FastifyServerOptions['logger'] = loggerOptions(config.log.level),
): Promise<Daemon> {
  // Made first: the audit log and the stores log before the HTTP app exists, and the app logs through it too.
  const log = createLogger(logger);
  // Before anything can fail on it: an operator who did not choose the data directory learns where it is, and a
  // start refused by the directory (not writable, held by another daemon) has a line naming it.
  log.info({ posture: config.posture, region: config.region, dataDir: config.dataDir }, 'sovereign is starting');
  const https = readTls(config);
  const manifest = loadManifest(manifestPath(config));
  const store = openStore(config.dataDir);
  let unlock: () => void;
  try {
    unlock = lockDataDir(config.dataDir);
  } catch (err) {
    await store.close();
    throw err;
  }
  try {
    await connectShared(
      store,
      { store: config.store, ...(config.postgres ? { postgres: config.postgres } : {}) },
      { serving: true, log: (level, message, detail) => log[level](detail ?? {}, message) },
    );
  } catch (err) {
    unlock();
    await store.close();
    throw err;
  }
  const state: DaemonState = { draining: false, startedAt: Date.now() };
  // A full disk fails lmdb's commits, and lmdb's own promises for them would reject unhandled: noted, not fatal.
  const stopAbsorbing = absorbCommitFailures((err) => {
    if (!store.writes.state) log.error({ err: err.message }, 'a database commit failed; calls that write get 503 until it takes writes');
    store.writes.note(err, 'a database commit');
  });

  const catalog = new ModelCatalog();
  const engines = new EngineRegistry();
  const limitStore = openLimitStore(config, log);
  const keyLimits = new KeyLimits(limitStore, log);
  const usage = new UsageMeter(
    store,
    (err) => {
      // Once per failure, not at every flush while the disk stays full.
      if (!store.writes.state) log.error({ err: err.message }, 'usage counts could not be written; they are kept for the next try');
      store.writes.note(err, 'the usage counts');
    },
    config.usage.billingDays,
  );
  usage.start();
  const metrics = new OperatorMetrics(store, {
    dataDir: config.dataDir,
    queues: () => catalog.all().map((m) => ({ model: m.id, waiting: engines.queueState(m.id)?.waiting ?? 0 })),
    onError: (err) => {
      if (!store.writes.state)
        log.error({ err: err.message }, 'the operator counters could not be written; they are kept for the next try');
    },
    onDiskError: (err) => log.warn({ err: err.message }, "the data directory's size could not be measured; tried again in a minute"),
  });
  metrics.start();
  if (config.alerts.checkpointLagSeconds * 1000 <= config.audit.heartbeatMs) {
    // An idle log signs a checkpoint every heartbeat: a limit under it raises the alert on every quiet stretch.
    log.warn(
      { checkpointLagSeconds: config.alerts.checkpointLagSeconds, heartbeatMs: config.audit.heartbeatMs },
      'alerts.checkpointLagSeconds is not above audit.heartbeatMs: an idle log will raise audit_checkpoint_late',
    );
  }
  let prometheus: PrometheusListener | null = null;
  const alerts = new AlertBook(
    { thresholds: config.alerts, disk: () => metrics.disk(), prometheusProblem: () => prometheus?.problem() ?? null },
    log,
  );
  // Taken (and the variables removed) before any program is started, so that none inherits them.
  const passed = passedListenFd();
  if (passed && passed.count > 1) log.warn({ sockets: passed.count }, 'systemd passed several sockets; serving on the first');
  const passedFd = passed?.fd ?? null;
  // Before anything else can reach out (the TPM signer, the engines): on sealed postures every attempt is refused.
  const boots = new BootLog(store);
  const events = new AuditEvents(log, boots.report.boots);
  const egress = new EgressService(config, store, log, (attempt) => {
    metrics.recordEgressRefused();
    events.egressRefused(attempt);
  });
  egress.start();
  if (boots.report.previous_stop === 'crash') {
    log.warn({ boots: boots.report.boots, crashes: boots.report.crashes }, 'the previous run did not stop cleanly');
  }
  const notifier = systemdNotifier(log);
  const documents = new DocumentLibrary(store, {
    chunksPerDocument: config.documents.maxChunksPerDocument,
    documentsPerKnowledgeBase: config.documents.maxDocumentsPerKnowledgeBase,
    vectorsDir: join(config.dataDir, 'vectors'),
    log,
    pdf: config.documents.pdf,
  });
  const images = new ImageFiles(join(config.dataDir, 'images'), config.images.urlTtlSeconds * 1000, log);
  const responses = new ResponseStore(store, config.responses.ttlSeconds * 1000);
  const keys = new KeyRegistry(store);
  const files = new FileStore(store, { ttlMs: config.files.ttlSeconds * 1000, maxBytesPerProject: config.files.maxBytesPerProject });
  const batches = new BatchStore(store, files);
  // Replicas sharing the batches (store: postgres) run each on one of them, its lease's holder.
  const leases = store.shared ? new BatchLeases(store) : null;
  const runner = new BatchRunner({ batches, files, log, parallel: config.batches.parallel, leases });
  const credentials = new InternalCredentials(keys);

  let app: FastifyInstance | undefined;
  let audit: AuditService | undefined;
  let upstreams: UpstreamsRuntime | undefined;
  try {
    // Their models are listed once their first health check answers; every connection goes through the egress guard.
    upstreams = startUpstreams({ config, manifest, catalog, engines, log });
    if (limitStore instanceof RedisLimitStore) await limitStore.start();
    audit = await AuditService.open(config, store, log);
    // Before any call: the CLI's waiting events, then this start's entry.
    await events.opened(audit, store, {
      config,
      boot: boots.report.boots,
      previousStop: boots.report.previous_stop,
      signer: audit.checkpoints?.signer ?? null,
    });
    app = buildApp(
      {
        config,
        keys,
        limits: keyLimits,
        gate: new InFlightGate(config.limits.maxInFlight, shareSizes(config.limits)),
        catalog,
        engines,
        state,
        fixedHeaders: { 'X-Region': config.region, 'X-Sovereign': String(isSovereign(config.posture)) },
        audit,
        usage,
        metrics,
        alerts,
        accounts: new Accounts(store),
        store,
        documents,
        images,
        responses,
        files,
        batches,
        credentials,
        egress,
        boots: boots.report,
        upstreams,
      },
      { log, ...(https ? { https } : {}) },
    );
    // A socket systemd passed (socket activation) is already bound; listen() takes it over.
    if (passedFd !== null) await app.listen({ fd: passedFd, host: '0.0.0.0' } as unknown as { port: number; host: string });
    else await app.listen({ host: listenHost(config), port: config.listen.port });
  } catch (err) {
    await app?.close();
    await usage.close();
    await metrics.close();
    images.close();
    responses.close();
    files.close();
    await limitStore.close();
    await upstreams?.close();
    await engines.close();
    await events.close();
    await audit?.close();
    egress.close();
    // A start that failed is not a crash; systemd hears it is over, and the notify socket is closed.
    boots.stopped();
    notifier.stopping();
    await store.close();
    stopAbsorbing();
    unlock();
    throw err;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.listen.port;
  const boundHost = passedFd !== null && typeof address === 'object' && address ? address.address : listenHost(config);
  const host = boundHost.includes(':') ? `[${boundHost}]` : boundHost;
  const url = `${https ? 'https' : 'http'}://${host}:${port}/v1`;
  log.info(
    { posture: config.posture, region: config.region, url, dataDir: config.dataDir, scrubScanner: scannerKind },
    'sovereign is serving',
  );
  notifier.ready(`serving ${url} (${config.posture})`);
  const report = () =>
    healthReport({
      config,
      catalog,
      engines,
      state,
      audit: audit,
      egress,
      boots: boots.report,
      store,
      metrics,
      alerts,
      upstreams: upstreams,
      limits: keyLimits,
    });
  alerts.watch(report);
  if (prometheusEnabled(config)) {
    prometheus = startPrometheus(
      config.metrics.listen,
      { health: report, totals: metrics.totals, disk: () => metrics.disk() },
      {
        problem: (err) =>
          log.error({ err: err.message, listen: config.metrics.listen }, 'the Prometheus endpoint cannot listen; the API serves on'),
        listening: ({ host, port }) =>
          log.info({ url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/metrics` }, 'the Prometheus endpoint is serving'),
      },
    );
  }
  // Models verify and load after the server listens: health and 503 model_not_ready tell clients while they do.
  const recordModelEvent = modelEventRecorder(events, boots.report.boots);
  const models = startModels({
    config,
    manifest,
    store,
    catalog,
    engines,
    log,
    onEvent: (event) => {
      if (event.type === 'model.listed') alerts.modelListed(event.id);
      else if (event.type === 'model.withdrawn' || event.type === 'model.not_listed') alerts.modelWithdrawn(event.id, event.reason);
      recordModelEvent(event);
    },
  });
  // Batches that had not ended resume, and new ones run, in the background: each line a call through the app.
  files.start((err) => log.error({ err: err.message }, 'expired files could not be deleted; tried again in a minute'));
  runner.start(inProcessCaller(app, credentials));
  // Saved vector graphs are checked (and damaged ones rebuilt) in the background; a query waits for its own.
  const documentsOpened = documents.open().catch((err: Error) => log.error({ err: err.message }, 'could not open the vector indexes'));

  let closing: Promise<{ drained: boolean }> | undefined;
  return {
    url,
    app,
    models,
    close() {
      closing ??= (async () => {
        state.draining = true;
        notifier.stopping();
        // The batch lines in progress finish (within the grace) before the engines they run on close; no new one starts.
        const [outcome] = await Promise.all([
          drain(app, config.timeouts.shutdownGraceMs, log),
          runner.stop(config.timeouts.shutdownGraceMs),
        ]);
        await upstreams.close();
        await models.dispose();
        await engines.close();
        await documentsOpened;
        await documents.close();
        await stopScrubWorker();
        await stopSchemaChecks();
        images.close();
        responses.close();
        files.close();
        await limitStore.close();
        await usage.close();
        alerts.close();
        await prometheus?.close();
        await metrics.close();
        // The egress counts and the CLI's last events, then a last checkpoint covering every entry.
        await events.close();
        await audit.close();
        egress.close();
        if (!boots.stopped()) {
          log.warn('the clean stop could not be recorded (the data directory cannot be written); the next start counts a crash');
        }
        // Its last commits may fail on a full disk: nothing acknowledged depends on them (the audit journal has it).
        await store.close().catch((err: Error) => log.warn({ err: err.message }, 'the database closed with writes that failed'));
        stopAbsorbing();
        unlock();
        log.info('sovereign stopped');
        return { drained: outcome === 'closed' };
      })();
      return closing;
    },
  };
}

function openLimitStore(config: Config, log: Logger): LimitStore {
  const redis = config.limits.redis;
  if (config.limits.store !== 'redis' || !redis) return new MemoryLimitStore();
  return new RedisLimitStore(
    {
      url: redis.url,
      keyPrefix: redis.keyPrefix ?? 'sovereign:',
      timeoutMs: redis.timeoutMs ?? 500,
      ...(redis.passwordFile ? { passwordFile: redis.passwordFile } : {}),
    },
    log,
  );
}

/** What the models runtime reports, as audit entries of this boot. */
function modelEventRecorder(events: AuditEvents, boot: number): (event: ModelEvent) => void {
  const record = (kind: EntryKind, fields: EntryFields) => void events.record(kind, { boot, ...fields });
  return (event) => {
    switch (event.type) {
      case 'models.served':
        return record('boot.models', { models: event.models.map(({ id, file, sha256 }) => ({ model: id, file, sha256 })) });
      case 'model.listed':
        return record('model.listed', { model: event.id, file: event.file, sha256: event.sha256 });
      case 'model.not_listed':
        // A file that is there but not served is withdrawn; a file never brought is not news (not reported).
        return record('model.withdrawn', { model: event.id, state: event.state, reason: event.reason, when: event.when });
      case 'model.withdrawn':
        return record('model.withdrawn', { model: event.id, state: event.state, reason: event.reason, when: event.when });
    }
  };
}

/** Closes the app, letting in-flight calls finish for up to `graceMs`; then closes what is still open. */
async function drain(app: FastifyInstance, graceMs: number, log: Logger): Promise<'closed' | 'timeout'> {
  let timer: NodeJS.Timeout | undefined;
  const graceOver = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), graceMs);
  });
  const closed = app.close().then(() => 'closed' as const);
  const outcome = await Promise.race([closed, graceOver]);
  clearTimeout(timer);
  if (outcome === 'timeout') {
    log.warn({ graceMs }, 'in-flight calls did not finish within the grace period; closing them');
    app.server.closeAllConnections();
    await closed;
  }
  return outcome;
}
