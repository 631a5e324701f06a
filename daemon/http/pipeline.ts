// The request pipeline: every stage a call meets, in the order it meets them, and where each applies. This list is
// the single source: server.ts registers it as it is, and docs/architecture.md draws it with the status each stage
// may return. Stages that do nothing on a posture (metering on sealed postures) are left out of the list there.
import type { FastifyBaseLogger } from 'fastify';
import type { AuditService } from '../audit/index.js';
import type { InternalCredentials } from '../auth/index.js';
import { isMetered, type Config } from '../config/index.js';
import type { KeyRegistry } from '../keys/index.js';
import type { InFlightGate, KeyLimits } from '../limits/index.js';
import type { OperatorMetrics } from '../metrics/index.js';
import type { ModelCatalog } from '../models/index.js';
import type { UsageMeter } from '../usage/index.js';
import type { Stage } from './stage.js';
import { admitStage, authenticateStage, releasePlaceStage } from './stages/admit.js';
import { auditStage } from './stages/audit.js';
import { closeDrainedConnectionsStage, settleRefusedBodyStage } from './stages/connections.js';
import { identifyStage } from './stages/identify.js';
import { limitRequestsStage, limitTokensStage, settleTokensStage } from './stages/limits.js';
import { resolveModelStage } from './stages/resolve-model.js';
import { scrubStage } from './stages/scrub.js';
import { metricsStage } from './stages/metrics.js';
import { usageStage } from './stages/usage.js';
import { watchBodyStage } from './stages/watch-body.js';
import { watchReaderStage } from './stages/watch-reader.js';

export interface DaemonState {
  draining: boolean;
  startedAt: number;
}

/** What the stages need. Every field is required: the app cannot be built without a stage a posture requires. */
export interface PipelineDeps {
  config: Config;
  keys: KeyRegistry;
  limits: KeyLimits;
  gate: InFlightGate;
  catalog: ModelCatalog;
  state: DaemonState;
  /** X-Region and X-Sovereign, fixed for the life of the process. */
  fixedHeaders: Record<string, string>;
  /** Every authenticated call's entry MUST be on disk before its response leaves. */
  audit: AuditService;
  /** Calls and tokens per key and route. */
  usage: UsageMeter;
  /** The operator's counters: per model, errors by code, redactions by type. */
  metrics: OperatorMetrics;
  /** What the calls the daemon makes to itself (a batch's lines) authenticate with (auth/internal.ts). */
  credentials: InternalCredentials;
}

/** Where a stage applies: every response (errors and 404s included), or the /v1 routes. */
export type Scope = 'every response' | '/v1';

/** What the stages take from the app they are registered on. */
export interface PipelineHost {
  log: FastifyBaseLogger;
  server: { closeIdleConnections(): void };
}

/** The pipeline's stages, in order, each with where it applies. The route's handler runs after `scrub`. */
export function pipeline(deps: PipelineDeps, host: PipelineHost): Array<{ scope: Scope; stage: Stage }> {
  const metered = isMetered(deps.config.posture);
  const list: Array<[Scope, Stage] | false> = [
    ['every response', identifyStage(deps)],
    ['every response', watchBodyStage(deps)],
    ['every response', watchReaderStage({ config: deps.config, log: host.log })],
    ['/v1', admitStage(deps.gate)],
    ['/v1', authenticateStage(deps)],
    metered && ['/v1', limitRequestsStage(deps)],
    // (fastify parses the body and validates it against the route's schema here.)
    ['/v1', resolveModelStage(deps.catalog)],
    metered && ['/v1', limitTokensStage(deps)],
    ['/v1', scrubStage()],
    // (the route's handler.)
    ['every response', settleRefusedBodyStage()],
    ['/v1', auditStage(deps)],
    ['every response', closeDrainedConnectionsStage({ state: deps.state, server: () => host.server })],
    ['/v1', usageStage(deps.usage)],
    ['/v1', metricsStage(deps.metrics)],
    ['/v1', releasePlaceStage()],
    metered && ['/v1', settleTokensStage(deps)],
  ];
  return list.filter((entry) => entry !== false).map(([scope, stage]) => ({ scope, stage }));
}
