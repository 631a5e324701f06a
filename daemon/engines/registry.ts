// Which engine serves each model id, by capability: the routes the HTTP layer looks a call's engine up in. The
// runtimes that make engines (service/models.ts, service/upstreams.ts) route models to them here; the daemon stops
// every engine here too, one way (Engine.close).
import type { Capability } from '../models/index.js';
import type { Engine, EngineOf, QueueState } from './types.js';

type Routes = { [C in Capability]: Map<string, EngineOf[C]> };

export class EngineRegistry {
  private readonly routes: Routes = { chat: new Map(), embeddings: new Map(), transcription: new Map(), image: new Map() };

  /** Routes `modelId`'s calls of `capability` to `engine`. */
  set<C extends Capability>(capability: C, modelId: string, engine: EngineOf[C]): void {
    (this.routes[capability] as Map<string, EngineOf[C]>).set(modelId, engine);
  }

  /** The engine serving `modelId` for `capability`, if one does. */
  get<C extends Capability>(capability: C, modelId: string): EngineOf[C] | undefined {
    return (this.routes[capability] as Map<string, EngineOf[C]>).get(modelId);
  }

  /** What health reports as the model's load: calls running and waiting, from the engine that serves it. */
  queueState(modelId: string): QueueState | undefined {
    const engine: Engine | undefined =
      this.routes.chat.get(modelId) ??
      this.routes.embeddings.get(modelId) ??
      this.routes.transcription.get(modelId) ??
      this.routes.image.get(modelId);
    return engine?.queueState?.(modelId);
  }

  /** Stops every engine it routes to, each once, one after another. */
  async close(): Promise<void> {
    const engines = new Set<Engine>();
    for (const routes of Object.values(this.routes)) for (const engine of routes.values()) engines.add(engine);
    for (const engine of engines) await engine.close();
  }
}
