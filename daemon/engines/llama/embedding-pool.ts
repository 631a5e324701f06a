// The contexts one embeddings model embeds on, and the inputs waiting for them.
//
// node-llama-cpp 3.21 gives one vector per decode: its binding reads the pooled embedding of sequence 0, or the last
// token of the batch, and nothing else (AddonContext::GetEmbedding). Several inputs in one decode would be computed
// but their vectors could not be read, so inputs are not packed into shared decodes: each context runs one input at a
// time, and the pool keeps all of its contexts busy at once. Their decodes run side by side on libuv's threads, each
// context on its share of the engine's threads (engine.ts). Each input is embedded exactly as it would be alone: same
// tokens, same context size, its own context cleared first; the thread count a decode runs on does not change the
// vector.
//
// The inputs of one call spread over every free context, and the calls in progress share the contexts input by
// input, so a short call (a query) beside a long one (a document's chunks) waits for one decode, not for the whole
// long call.
import type { LlamaEmbeddingContext, Token } from 'node-llama-cpp';

interface Call {
  inputs: Token[][];
  /** The next input to hand out. */
  next: number;
  /** Inputs handed out and not yet back. */
  running: number;
  vectors: Float32Array[];
  settled: boolean;
  resolve(vectors: Float32Array[]): void;
  reject(err: Error): void;
}

export class EmbeddingPool {
  private readonly free: LlamaEmbeddingContext[];
  /** Calls with inputs not yet handed out, in the order they take turns. */
  private readonly waiting: Call[] = [];
  private disposed = false;

  constructor(private readonly contexts: LlamaEmbeddingContext[]) {
    if (!contexts.length) throw new Error('an embedding pool needs at least one context');
    this.free = [...contexts];
  }

  get size(): number {
    return this.contexts.length;
  }

  /**
   * The raw (not normalised) vector of each input, in order. `inputs` are token lists without the model's begin and
   * end tokens (llama.cpp's input preparation adds them to the array it is given, so each is copied). Rejects when the
   * signal aborts: inputs not yet started are dropped, and one already decoding finishes on its context unread.
   */
  embed(inputs: Token[][], signal: AbortSignal): Promise<Float32Array[]> {
    if (signal.aborted) return Promise.reject(signal.reason as Error);
    if (this.disposed) return Promise.reject(new Error('the embeddings model was unloaded'));
    if (!inputs.length) return Promise.resolve([]);
    return new Promise<Float32Array[]>((resolve, reject) => {
      const onAbort = () => this.fail(call, signal.reason as Error);
      const call: Call = {
        inputs,
        next: 0,
        running: 0,
        vectors: new Array<Float32Array>(inputs.length),
        settled: false,
        resolve: (vectors) => {
          signal.removeEventListener('abort', onAbort);
          resolve(vectors);
        },
        reject: (err) => {
          signal.removeEventListener('abort', onAbort);
          reject(err);
        },
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(call);
      this.pump();
    });
  }

  /** Disposes every context; calls still waiting are refused. */
  async dispose(): Promise<void> {
    this.disposed = true;
    for (const call of [...this.waiting]) this.fail(call, new Error('the embeddings model was unloaded'));
    for (const context of this.contexts) await context.dispose();
  }

  /**
   * Hands out inputs while a context is free: to the call with the fewest inputs decoding (the oldest among equals),
   * which then goes to the back of the line.
   */
  private pump(): void {
    while (this.free.length && this.waiting.length) {
      let at = 0;
      for (let i = 1; i < this.waiting.length; i++) if (this.waiting[i]!.running < this.waiting[at]!.running) at = i;
      const call = this.waiting.splice(at, 1)[0]!;
      const index = call.next++;
      if (call.next < call.inputs.length) this.waiting.push(call);
      call.running++;
      void this.run(this.free.pop()!, call, index);
    }
  }

  private async run(context: LlamaEmbeddingContext, call: Call, index: number): Promise<void> {
    try {
      const embedding = await context.getEmbeddingFor([...call.inputs[index]!]);
      call.running--;
      if (call.settled) return;
      call.vectors[index] = Float32Array.from(embedding.vector);
      if (call.running === 0 && call.next >= call.inputs.length) {
        call.settled = true;
        call.resolve(call.vectors);
      }
    } catch (err) {
      call.running--;
      this.fail(call, err as Error);
    } finally {
      this.free.push(context);
      if (!this.disposed) this.pump();
    }
  }

  private fail(call: Call, err: Error): void {
    if (call.settled) return;
    call.settled = true;
    const at = this.waiting.indexOf(call);
    if (at >= 0) this.waiting.splice(at, 1);
    call.reject(err);
  }
}
