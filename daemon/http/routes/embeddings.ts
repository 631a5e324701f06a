// POST /v1/embeddings: OpenAI's shape; float or base64 (little-endian float32, as OpenAI encodes it).
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { EmbeddingEngine, EngineRegistry } from '../../engines/index.js';
import { ApiError } from '../../errors/index.js';
import { ScrubSession } from '../../scrub/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { abortOnDisconnect } from '../lifetime.js';
import { noteWait, ticketFor, type TicketDeps } from '../tickets.js';
import { embeddingsBody } from './schemas.js';

/** What the embeddings route needs. */
export interface EmbeddingsRouteDeps extends TicketDeps {
  engines: EngineRegistry;
}

interface EmbeddingsBody {
  model: string;
  input: string | string[] | number[] | number[][];
  encoding_format?: 'float' | 'base64';
  service_tier?: 'auto' | 'default' | 'flex' | 'priority' | null;
  dimensions?: number;
}

function inputsOf(input: EmbeddingsBody['input']): Array<string | number[]> {
  if (typeof input === 'string') return [input];
  if (input.length && typeof input[0] === 'number') return [input as number[]];
  return input as Array<string | number[]>;
}

function estimateTokens(raw: unknown, context: number | undefined): number {
  let total = 0;
  for (const item of inputsOf((raw as EmbeddingsBody).input)) {
    const tokens = typeof item === 'string' ? Buffer.byteLength(item) : item.length;
    total += context ? Math.min(tokens, context) : tokens;
  }
  return total;
}

/** Shortened embeddings are re-normalised to unit length, as OpenAI's are. */
function shorten(vector: Float32Array, size: number): Float32Array {
  const out = vector.slice(0, size);
  let norm = 0;
  for (const v of out) norm += v * v;
  norm = Math.sqrt(norm);
  if (norm > 0) for (let i = 0; i < out.length; i++) out[i] = out[i]! / norm;
  return out;
}

/**
 * The inputs, with each token array read back into text and scrubbed (the scrub stage saw only strings): an array
 * whose text holds a value is embedded as its scrubbed text, any other as sent. An engine that cannot read tokens back
 * (an upstream's vocabulary is not known here) cannot have them checked, so they are refused.
 */
function scrubbedTokens(
  engine: EmbeddingEngine,
  modelId: string,
  request: FastifyRequest<{ Body: EmbeddingsBody }>,
): Array<string | number[]> {
  const inputs = inputsOf(request.body.input);
  if (inputs.every((input) => typeof input === 'string')) return inputs;
  if (!engine.detokenize) {
    throw new ApiError(
      'invalid_request_error',
      `Token arrays cannot be checked for personal data before they reach '${modelId}', so they are not accepted for it. Send the input as text.`,
      { param: 'input' },
    );
  }
  const session = request.call.scrubSession ?? new ScrubSession();
  const scrubbed = inputs.map((input) => {
    if (typeof input === 'string') return input;
    const text = engine.detokenize!(modelId, input);
    const clean = session.scrub(text);
    return clean === text ? input : clean;
  });
  request.call.redactions = session.counts();
  return scrubbed;
}

export function registerEmbeddingsRoute(v1: FastifyInstance, deps: EmbeddingsRouteDeps): void {
  const declaration: RouteDeclaration = { auth: true, capability: 'embeddings', tokens: estimateTokens, scrub: 'embeddings' };
  v1.post<{ Body: EmbeddingsBody }>(
    '/embeddings',
    { schema: { body: embeddingsBody }, config: { declaration } },
    async (request, reply) => {
      const modelId = request.call.model!.id;
      const engine = deps.engines.get('embeddings', modelId);
      if (!engine)
        throw new ApiError('model_not_ready', `No engine is serving '${modelId}' right now. Retry shortly.`, {
          headers: { 'retry-after': '5' },
        });
      const { dimensions } = request.body;
      if (dimensions !== undefined) {
        const native = engine.dimensions(modelId);
        if (!native.shortenable && dimensions !== native.size) {
          throw new ApiError(
            'invalid_request_error',
            `The model '${modelId}' only returns ${native.size} dimensions; omit 'dimensions' or set it to ${native.size}.`,
            { param: 'dimensions' },
          );
        }
        if (dimensions > native.size) {
          throw new ApiError('invalid_request_error', `'dimensions' must be at most ${native.size} for '${modelId}'.`, {
            param: 'dimensions',
          });
        }
      }
      const ticket = ticketFor(deps, request, request.body.service_tier);
      const work = engine.embed(modelId, scrubbedTokens(engine, modelId, request), abortOnDisconnect(request, reply), { ticket });
      startedEngineWork(request.call, request.call.model!, work);
      const result = await work;
      noteWait(reply, ticket);
      request.call.usedTokens = result.promptTokens;
      const base64 = request.body.encoding_format === 'base64';
      return {
        object: 'list',
        data: result.vectors.map((vector, index) => {
          const v = dimensions !== undefined && dimensions < vector.length ? shorten(vector, dimensions) : vector;
          return {
            object: 'embedding',
            index,
            embedding: base64 ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') : Array.from(v),
          };
        }),
        model: modelId,
        usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
      };
    },
  );
}
