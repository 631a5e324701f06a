// What this deployment can serve now. /v1/models lists the models that are ready (or verified and waiting for
// their first call), the pipeline resolves each call's `model` here, and health reports every model's state,
// including the manifest entries this device cannot serve and why.
import { ApiError } from '../errors/index.js';
import type { Capability } from './manifest.js';

/**
 * - `ready`: loaded, serving.
 * - `unloaded`: verified and fits; loads on its first call (models.load = on-demand).
 * - `loading`: being verified or loaded; calls get 503 model_not_ready.
 * - `failed`: could not load; withdrawn from the list.
 */
export type Readiness = 'ready' | 'unloaded' | 'loading' | 'failed';

export interface ServedModel {
  id: string;
  capability: Capability;
  ownedBy: string;
  /** Seconds since the epoch, as OpenAI's `created`. */
  created: number;
  readiness: Readiness;
  /** The context it is served with, in tokens: no call can use more. */
  contextTokens?: number;
  /** The upstream (config `upstreams[].name`) that serves it, when it is not served on this device. */
  upstream?: string;
  /** Served by a frontier provider, outside the sovereign boundary (config `upstreams[].frontier`). */
  frontier?: boolean;
  /** Why the model is not ready, for health and the operator. */
  detail?: string;
  /** Starts loading an `unloaded` model. */
  load?: () => void;
}

/** owned_by as clients see it (/v1/models, health): on the frontier posture every model says it is non-sovereign. */
export function ownedByShown(model: Pick<ServedModel, 'ownedBy'>, sovereign: boolean): string {
  return sovereign ? model.ownedBy : `${model.ownedBy} (non-sovereign)`;
}

export interface UnavailableModel {
  id: string;
  capability: Capability;
  state: string;
  reason: string;
}

export class ModelCatalog {
  private readonly models = new Map<string, ServedModel>();
  private unavailableModels: UnavailableModel[] = [];

  constructor(models: ServedModel[] = []) {
    for (const model of models) this.models.set(model.id, model);
  }

  set(model: ServedModel): void {
    this.models.set(model.id, model);
  }

  update(id: string, change: Partial<Pick<ServedModel, 'readiness' | 'detail'>>): void {
    const model = this.models.get(id);
    if (!model) return;
    const next = { ...model, ...change };
    if (change.readiness && change.readiness !== 'failed' && !('detail' in change)) delete next.detail;
    this.models.set(id, next);
  }

  remove(id: string): void {
    this.models.delete(id);
  }

  setUnavailable(models: UnavailableModel[]): void {
    this.unavailableModels = models;
  }

  unavailable(): UnavailableModel[] {
    return this.unavailableModels;
  }

  /** Models a client may call now. Loading and failed ones are withheld: a listed model never fails for hardware. */
  listed(): ServedModel[] {
    return [...this.models.values()].filter((m) => m.readiness === 'ready' || m.readiness === 'unloaded');
  }

  all(): ServedModel[] {
    return [...this.models.values()];
  }

  /** The model a call names, or the 404/503 that explains why it cannot be used. */
  resolve(id: unknown, capability: Capability): ServedModel {
    if (typeof id !== 'string' || id === '') {
      throw new ApiError('invalid_request_error', "Missing 'model': name one of the models GET /v1/models lists.", { param: 'model' });
    }
    const model = this.models.get(id);
    if (!model || model.capability !== capability) {
      const alternatives = this.listed()
        .filter((m) => m.capability === capability)
        .map((m) => m.id);
      throw new ApiError(
        'model_not_found',
        `The model '${id}' does not exist or is not served here for ${capability}. ` +
          (alternatives.length
            ? `Available: ${alternatives.join(', ')}; GET /v1/models lists them.`
            : `This deployment serves no ${capability} model now; GET /v1/models lists what it serves.`),
        { param: 'model' },
      );
    }
    // An upstream's model comes back when its upstream does: a pause, not a withdrawal.
    if (model.upstream && model.readiness !== 'ready') {
      throw new ApiError(
        'model_not_ready',
        `The server behind '${id}' is not serving it right now. Retry after the number of seconds in Retry-After.`,
        {
          param: 'model',
          headers: { 'retry-after': '5' },
        },
      );
    }
    if (model.readiness === 'failed') {
      throw new ApiError('model_not_found', `The model '${id}' failed to load and was withdrawn; GET /v1/models lists what is served.`, {
        param: 'model',
      });
    }
    if (model.readiness === 'unloaded') model.load?.();
    if (model.readiness === 'unloaded' || model.readiness === 'loading') {
      throw new ApiError('model_not_ready', `The model '${id}' is loading. Retry after the number of seconds in Retry-After.`, {
        param: 'model',
        headers: { 'retry-after': '2' },
      });
    }
    return model;
  }
}
