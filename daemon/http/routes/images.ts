// POST /v1/images/generations: OpenAI's shape (prompt, model, n, size, response_format url or b64_json, quality,
// style, output_format png/jpeg/webp, output_compression). Served only where an image engine exists (an image
// server upstream); elsewhere the call gets 404 operation_unavailable. The prompt is scrubbed like any text a model
// sees. Every image is normalised here, whatever the engine made (images/normalise.ts): the size asked for, the
// format asked for, no metadata. `url` answers point at GET /v1/images/files/<name>, served for images.urlTtlSeconds
// to keys of the same project.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { EngineRegistry } from '../../engines/index.js';
import type { ModelCatalog } from '../../models/index.js';
import type { Config } from '../../config/index.js';
import { ApiError } from '../../errors/index.js';
import { normaliseImage, type ImageFormat, type ImageFiles } from '../../images/index.js';
import { noRedactions, ScrubSession } from '../../scrub/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { abortOnDisconnect } from '../lifetime.js';
import { imageGenerationBody } from './schemas.js';
import { noteWait, ticketFor, type TicketDeps } from '../tickets.js';

/** What the image routes need. */
export interface ImageRouteDeps extends TicketDeps {
  config: Config;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  /** Generated images kept for `url` answers. */
  images: ImageFiles;
}

interface ImageGenerationBody {
  prompt: string;
  model?: string;
  n?: number;
  size?: string;
  response_format?: 'url' | 'b64_json';
  output_format?: ImageFormat;
  output_compression?: number;
  quality?: string;
  style?: string;
  background?: string;
}

/** Sides from 64 to 4096 pixels, and at most 16 megapixels. */
const SMALLEST_SIDE = 64;
const LARGEST_SIDE = 4096;
const LARGEST_PIXELS = 16 * 1024 * 1024;

function parseSize(size: string | undefined): { width: number; height: number } | null {
  if (size === undefined || size === 'auto') return null;
  const [width, height] = size.split('x').map(Number) as [number, number];
  if (width < SMALLEST_SIDE || height < SMALLEST_SIDE || width > LARGEST_SIDE || height > LARGEST_SIDE || width * height > LARGEST_PIXELS) {
    throw new ApiError(
      'invalid_request_error',
      `size '${size}' is out of range: each side from ${SMALLEST_SIDE} to ${LARGEST_SIDE} pixels and at most 16 megapixels (for example 1024x1024), or 'auto'.`,
      { param: 'size' },
    );
  }
  return { width, height };
}

export function registerImageRoutes(v1: FastifyInstance, deps: ImageRouteDeps): void {
  // A reservation against the key's token limit: the prompt's bytes bound its tokens.
  const declaration: RouteDeclaration = {
    auth: true,
    scrub: 'image',
    tokens: (body) => Buffer.byteLength((body as ImageGenerationBody).prompt ?? ''),
  };
  v1.post<{ Body: ImageGenerationBody }>(
    '/images/generations',
    { schema: { body: imageGenerationBody }, config: { declaration } },
    (request, reply) => generateImages(deps, request, reply),
  );

  v1.get<{ Params: { name: string } }>('/images/files/:name', { config: { declaration: { auth: true } } }, async (request, reply) => {
    const found = await deps.images.read(request.call.principal!.projectId, request.params.name);
    if (!found) {
      throw new ApiError(
        'not_found',
        `No image '${request.params.name}' for this key's project: image URLs last ${deps.config.images.urlTtlSeconds} s and are served only to keys of the project that made them.`,
      );
    }
    const seconds = Math.max(0, Math.floor((found.expiresAt - Date.now()) / 1000));
    return reply
      .type(found.contentType)
      .header('cache-control', `private, max-age=${seconds}`)
      .header('x-content-type-options', 'nosniff')
      .send(found.bytes);
  });
}

/** POST /v1/images/generations: the engine's images, normalised (size, format, no metadata), as URLs or base64. */
async function generateImages(deps: ImageRouteDeps, request: FastifyRequest<{ Body: ImageGenerationBody }>, reply: FastifyReply) {
  const body = request.body;
  const { model, engine } = imageEngine(deps, request);
  const size = parseSize(body.size);
  const format: ImageFormat = body.output_format ?? 'png';
  if (body.output_compression !== undefined && format === 'png') {
    throw new ApiError('invalid_request_error', 'output_compression applies to jpeg and webp only; omit it for png.', {
      param: 'output_compression',
    });
  }
  const asUrl = (body.response_format ?? 'url') === 'url';
  const files = deps.images;

  const n = body.n ?? 1;
  const ticket = ticketFor(deps, request);
  const work = engine.generate(
    model.id,
    {
      prompt: body.prompt,
      n,
      size: size ? `${size.width}x${size.height}` : null,
      ...(body.quality ? { quality: body.quality } : {}),
      ...(body.style ? { style: body.style } : {}),
      ...(body.background ? { background: body.background } : {}),
      ticket,
    },
    abortOnDisconnect(request, reply),
  );
  startedEngineWork(request.call, model, work);
  const result = await work;
  noteWait(reply, ticket);
  request.call.completionTokens = result.completionTokens ?? 0;
  request.call.usedTokens = (result.promptTokens ?? Buffer.byteLength(body.prompt)) + request.call.completionTokens;
  if (result.images.length < n) {
    request.log.warn({ model: model.id, asked: n, got: result.images.length }, 'the image engine made fewer images than asked');
  }
  const images = await Promise.all(
    result.images.map((image) =>
      normaliseImage(image, {
        width: size?.width ?? null,
        height: size?.height ?? null,
        format,
        ...(body.output_compression !== undefined ? { compression: body.output_compression } : {}),
      }).catch((err: Error) => {
        request.log.warn({ model: model.id, err: err.message }, 'the image engine sent an image that cannot be read');
        throw new ApiError('internal_error', `The server behind '${model.id}' sent an image that cannot be read. Retry the request.`);
      }),
    ),
  );
  // A prompt the engine rewrote is model output: scrubbed like any answer (same placeholders as the prompt) unless
  // scrub.output is off.
  const tally = noRedactions();
  const revised = result.revisedPrompts.map((text) =>
    text === null || !deps.config.scrub.output ? text : (request.call.scrubSession ?? new ScrubSession()).scrub(text, tally),
  );
  if (deps.config.scrub.output && revised.some((text) => text !== null)) request.call.outputRedactions = tally;
  const project = request.call.principal!.projectId;
  const base = `${request.protocol}://${request.host}/v1/images/files/`;
  const data = await Promise.all(
    images.map(async (image, i) => ({
      ...(asUrl ? { url: base + (await files.save(project, image, format)).name } : { b64_json: image.toString('base64') }),
      ...(typeof revised[i] === 'string' ? { revised_prompt: revised[i] } : {}),
    })),
  );
  return { created: Math.floor(Date.now() / 1000), data };
}

/** The image model the call names (OpenAI's default: the first image model served) and its engine. */
function imageEngine(deps: ImageRouteDeps, request: FastifyRequest<{ Body: ImageGenerationBody }>) {
  const body = request.body;
  const imageModels = deps.catalog.all().filter((m) => m.capability === 'image');
  if (!imageModels.length) {
    throw new ApiError(
      'operation_unavailable',
      'This deployment has no image engine: image generation needs an image server upstream (a GPU posture). GET /v1/models lists what is served here.',
    );
  }
  // OpenAI picks a default model; here it is the first image model served.
  const modelId = body.model ?? deps.catalog.listed().find((m) => m.capability === 'image')?.id ?? imageModels[0]!.id;
  const model = deps.catalog.resolve(modelId, 'image');
  request.call.model = model;
  const engine = deps.engines.get('image', model.id);
  if (!engine)
    throw new ApiError('model_not_ready', `No engine is serving '${model.id}' right now. Retry shortly.`, {
      headers: { 'retry-after': '5' },
    });
  return { model, engine };
}
