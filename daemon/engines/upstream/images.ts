// Image generation through an OpenAI-compatible image server (a GPU rack's): the scrubbed prompt under the server's
// model name, the images back as base64 (or, from a server that only gives URLs, fetched from that same server and
// nowhere else). The route normalises what comes back (size, format, metadata) with sharp.
import type { FastifyBaseLogger } from 'fastify';
import type { ImageEngine, ImageRequest, ImageResult, QueueState } from '../types.js';
import { CallsInFlight, closeClients, routeOf } from './calls.js';
import type { UpstreamClient } from './client.js';
import { readJson } from './body.js';
import { callUpstream, type FailedCall } from './errors.js';

export interface UpstreamImageRoute {
  client: UpstreamClient;
  upstreamModel: string;
}

interface ImageList {
  data?: Array<{ b64_json?: unknown; url?: unknown; revised_prompt?: unknown }>;
  usage?: { input_tokens?: unknown; prompt_tokens?: unknown; output_tokens?: unknown };
}

/** The most bytes one image may have as the upstream sends it (before normalising). */
const LARGEST_IMAGE = 64 * 1024 * 1024;

export class UpstreamImageEngine implements ImageEngine {
  private readonly calls: CallsInFlight;

  constructor(
    private readonly routes: ReadonlyMap<string, UpstreamImageRoute>,
    private readonly log: FastifyBaseLogger,
  ) {
    this.calls = new CallsInFlight(routes);
  }

  async generate(modelId: string, request: ImageRequest, signal: AbortSignal): Promise<ImageResult> {
    const route = routeOf(this.routes, modelId);
    const body = JSON.stringify({
      model: route.upstreamModel,
      prompt: request.prompt,
      n: request.n,
      response_format: 'b64_json',
      ...(request.size ? { size: request.size } : {}),
      ...(request.quality ? { quality: request.quality } : {}),
      ...(request.style ? { style: request.style } : {}),
      ...(request.background ? { background: request.background } : {}),
    });
    const call: FailedCall = { client: route.client, upstreamModel: route.upstreamModel, modelId, log: this.log };
    return this.calls.track(
      modelId,
      () =>
        callUpstream(
          call,
          signal,
          () => route.client.post('/images/generations', body, signal),
          async (response) => {
            const list = await readJson<ImageList>(response, 256 * 1024 * 1024);
            if (!Array.isArray(list.data) || list.data.length === 0) throw new Error('the upstream returned no images');
            const images: Buffer[] = [];
            const revisedPrompts: Array<string | null> = [];
            for (const item of list.data.slice(0, request.n)) {
              revisedPrompts.push(typeof item.revised_prompt === 'string' ? item.revised_prompt.slice(0, 32_000) : null);
              if (typeof item.b64_json === 'string') images.push(Buffer.from(item.b64_json, 'base64'));
              else if (typeof item.url === 'string') images.push(await route.client.fetchOwn(item.url, signal, LARGEST_IMAGE));
              else throw new Error('an image has neither b64_json nor url');
            }
            if (images.some((image) => image.length === 0 || image.length > LARGEST_IMAGE))
              throw new Error('an image is empty or too large');
            const count = (n: unknown) => (typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : null);
            return {
              images,
              revisedPrompts,
              promptTokens: count(list.usage?.input_tokens ?? list.usage?.prompt_tokens),
              completionTokens: count(list.usage?.output_tokens),
            };
          },
        ),
      { signal, ticket: request.ticket },
    );
  }

  queueState(modelId: string): QueueState | undefined {
    return this.calls.queueState(modelId);
  }

  close(): Promise<void> {
    return closeClients(this.routes);
  }
}
