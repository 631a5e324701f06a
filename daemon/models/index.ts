// What this deployment can serve now. Engines register models here once a model's file is present, verified and
// fits the device; /v1/models lists them and the pipeline resolves the `model` of each call against them.
import { ApiError } from '../errors/index.js';

export type Capability = 'chat' | 'embeddings' | 'transcription' | 'image';
export type Readiness = 'ready' | 'loading' | 'failed';

export interface ServedModel {
  id: string;
  capability: Capability;
  ownedBy: string;
  /** Seconds since the epoch, as OpenAI's `created`. */
  created: number;
  readiness: Readiness;
  /** Why the model is not ready, for health and the operator. */
  detail?: string;
}

export class ModelCatalog {
  private readonly models = new Map<string, ServedModel>();

  constructor(models: ServedModel[] = []) {
    for (const model of models) this.models.set(model.id, model);
  }

  set(model: ServedModel): void {
    this.models.set(model.id, model);
  }

  /** Models a client may call now: `loading` and `failed` ones are withheld so a listed model never fails for hardware. */
  listed(): ServedModel[] {
    return [...this.models.values()].filter((m) => m.readiness === 'ready');
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
    if (!model || model.capability !== capability || model.readiness === 'failed') {
      const alternatives = this.listed()
        .filter((m) => m.capability === capability)
        .map((m) => m.id);
      throw new ApiError(
        'model_not_found',
        `The model '${id}' does not exist or is not served here for ${capability}. ` +
          (alternatives.length
            ? `Available: ${alternatives.join(', ')}.`
            : `This deployment serves no ${capability} model; GET /v1/models lists what it serves.`),
        { param: 'model' },
      );
    }
    if (model.readiness === 'loading') {
      throw new ApiError('model_not_ready', `The model '${id}' is still loading. Retry in a few seconds.`, {
        param: 'model',
        headers: { 'retry-after': '5' },
      });
    }
    return model;
  }
}
