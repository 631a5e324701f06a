// Embeddings through an OpenAI-compatible upstream: the scrubbed inputs under the upstream's model name, the vectors
// back as base64 float32 (as OpenAI's SDK asks for them; a plain number array is accepted too). The width of a model's
// vectors is learned once from a one-word call when its upstream first lists it, so `dimensions` is checked before
// a call leaves.
import type { FastifyBaseLogger } from 'fastify';
import { ApiError } from '../../errors/index.js';
import type { CallTicket, EmbeddingEngine, EmbeddingResult, EmbedOptions, QueueState } from '../types.js';
import { CallsInFlight, closeClients, routeOf } from './calls.js';
import type { UpstreamClient } from './client.js';
import { readJson } from './body.js';
import { callUpstream, type FailedCall } from './errors.js';

export interface UpstreamEmbeddingRoute {
  client: UpstreamClient;
  upstreamModel: string;
  /** Whether a vector may be cut to fewer dimensions (a Matryoshka-trained model); config `shortenable`. */
  shortenable: boolean;
}

interface EmbeddingList {
  data?: Array<{ index?: number; embedding?: string | number[] }>;
  usage?: { prompt_tokens?: number };
}

function vectorOf(embedding: string | number[] | undefined): Float32Array {
  if (typeof embedding === 'string') {
    const bytes = Buffer.from(embedding, 'base64');
    if (bytes.length % 4 !== 0) throw new Error('a base64 embedding is not a whole number of float32 values');
    // Copied out: the decoded buffer may sit at an offset a Float32Array cannot start at.
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  }
  if (Array.isArray(embedding) && embedding.every((v) => typeof v === 'number')) return Float32Array.from(embedding);
  throw new Error('an embedding is neither base64 nor a list of numbers');
}

export class UpstreamEmbeddingEngine implements EmbeddingEngine {
  private readonly calls: CallsInFlight;
  private readonly sizes = new Map<string, number>();

  /** Told when a model's vectors changed width (the service withdraws it until its width is learned again). */
  onWidthChanged: (modelId: string) => void = () => {};

  constructor(
    private readonly routes: ReadonlyMap<string, UpstreamEmbeddingRoute>,
    private readonly log: FastifyBaseLogger,
  ) {
    this.calls = new CallsInFlight(routes);
  }

  /** Whether the model's width is known (it is served only then). */
  knows(modelId: string): boolean {
    return this.sizes.has(modelId);
  }

  /** Learns the model's width from a one-word call. */
  async learn(modelId: string, signal: AbortSignal): Promise<void> {
    const result = await this.send(modelId, ['.'], signal, true);
    this.sizes.set(modelId, result.vectors[0]!.length);
  }

  dimensions(modelId: string): { size: number; shortenable: boolean } {
    const size = this.sizes.get(modelId);
    if (size === undefined) {
      throw new ApiError('model_not_ready', `'${modelId}' is not ready yet. Retry shortly.`, { headers: { 'retry-after': '5' } });
    }
    return { size, shortenable: this.routes.get(modelId)?.shortenable ?? false };
  }

  embed(modelId: string, inputs: Array<string | number[]>, signal: AbortSignal, options: EmbedOptions = {}): Promise<EmbeddingResult> {
    return this.send(modelId, inputs, signal, false, options.ticket);
  }

  /** `probe`: the test call that learns the width, sent on the upstream's probe connection. */
  private async send(
    modelId: string,
    inputs: Array<string | number[]>,
    signal: AbortSignal,
    probe: boolean,
    ticket?: CallTicket,
  ): Promise<EmbeddingResult> {
    const route = routeOf(this.routes, modelId);
    const call: FailedCall = { client: route.client, upstreamModel: route.upstreamModel, modelId, log: this.log };
    const body = JSON.stringify({ model: route.upstreamModel, input: inputs, encoding_format: 'base64' });
    return this.calls.track(
      modelId,
      () =>
        callUpstream(
          call,
          signal,
          () => route.client.post('/embeddings', body, signal, { probe }),
          async (response) => {
            const list = await readJson<EmbeddingList>(response, 256 * 1024 * 1024);
            if (!Array.isArray(list.data) || list.data.length !== inputs.length) {
              throw new Error(`the upstream returned ${list.data?.length ?? 'no'} embeddings for ${inputs.length} inputs`);
            }
            const vectors = new Array<Float32Array>(inputs.length);
            list.data.forEach((item, i) => {
              const at = typeof item.index === 'number' ? item.index : i;
              if (at < 0 || at >= inputs.length || vectors[at]) throw new Error('the upstream’s embeddings have bad indexes');
              vectors[at] = vectorOf(item.embedding);
            });
            const width = vectors[0]!.length;
            if (!width || vectors.some((v) => v.length !== width)) throw new Error('the upstream’s embeddings differ in width');
            const known = this.sizes.get(modelId);
            if (known !== undefined && known !== width) {
              // The upstream serves another model under that name now: its width is learned again before it is listed.
              this.sizes.delete(modelId);
              this.onWidthChanged(modelId);
              throw new Error(`the upstream’s embeddings changed width from ${known} to ${width}`);
            }
            const reported = list.usage?.prompt_tokens;
            // Without a count from the upstream, bytes bound tokens from above (as for chat).
            const promptTokens =
              typeof reported === 'number' && reported >= 0
                ? reported
                : inputs.reduce((n, input) => n + (typeof input === 'string' ? Buffer.byteLength(input) : input.length), 0);
            return { vectors, promptTokens };
          },
        ),
      probe ? undefined : { signal, ticket },
    );
  }

  queueState(modelId: string): QueueState | undefined {
    return this.calls.queueState(modelId);
  }

  close(): Promise<void> {
    return closeClients(this.routes);
  }
}
