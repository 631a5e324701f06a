// What every upstream engine (chat, embeddings, transcription, images) does around a call: find the model's route,
// and count the calls in flight per model, which health reports as `busy` (an upstream queues on its own side, so
// nothing waits here). And how each stops: by closing the clients its routes send through.
import { ApiError } from '../../errors/index.js';
import type { CallTicket, QueueState } from '../types.js';
import type { UpstreamClient } from './client.js';

/** The model's route, or the 503 a call to a model no upstream serves gets. */
export function routeOf<R>(routes: ReadonlyMap<string, R>, modelId: string): R {
  const route = routes.get(modelId);
  if (!route) throw new ApiError('model_not_ready', `No upstream serves '${modelId}' right now.`, { headers: { 'retry-after': '5' } });
  return route;
}

export class CallsInFlight {
  private readonly busy = new Map<string, number>();

  constructor(private readonly routes: ReadonlyMap<string, { client: UpstreamClient }>) {}

  /**
   * Runs `work` counted as one call in flight to `modelId`, once the upstream's scheduler gives it a connection (a
   * client's call: `turn`); a probe of the daemon's own goes at once, on the probes' connection.
   */
  async track<T>(modelId: string, work: () => Promise<T>, turn?: { signal: AbortSignal; ticket: CallTicket | undefined }): Promise<T> {
    const release = turn ? await routeOf(this.routes, modelId).client.slots.acquire(turn.signal, turn.ticket) : null;
    this.busy.set(modelId, (this.busy.get(modelId) ?? 0) + 1);
    try {
      return await work();
    } finally {
      this.busy.set(modelId, this.busy.get(modelId)! - 1);
      release?.();
    }
  }

  /** The model's calls in flight, and the calls waiting for its upstream's connections (every model's there). */
  queueState(modelId: string): QueueState | undefined {
    const route = this.routes.get(modelId);
    if (!route) return undefined;
    const { waiting, byTier } = route.client.slots.state;
    return { busy: this.busy.get(modelId) ?? 0, waiting, ...(byTier ? { byTier } : {}) };
  }
}

/**
 * Closes every client the routes send through. One upstream's client serves the routes of every engine that has a
 * model on it, so each engine closes it (UpstreamClient.close is safe to call again).
 */
export async function closeClients(routes: ReadonlyMap<string, { client: UpstreamClient }>): Promise<void> {
  await Promise.all([...new Set([...routes.values()].map((route) => route.client))].map((client) => client.close()));
}
