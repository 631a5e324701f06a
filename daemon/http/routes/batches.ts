// /v1/batches: OpenAI's Batch API. A batch runs the lines of one of the project's input files (/v1/files), each as a
// call of the key that made the batch, in the background (daemon/batches/runner.ts); its answers become the project's
// output and error files. Batches are seen and cancelled by their project's keys only (another project's is 404).
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../../config/index.js';
import { ApiError } from '../../errors/index.js';
import { batchObject, BATCH_URLS, isBatchUrl, type BatchStore, type FileStore } from '../../batches/index.js';
import { ScrubSession } from '../../scrub/index.js';

export interface BatchRouteDeps {
  config: Config;
  files: FileStore;
  batches: BatchStore;
}

/** OpenAI's only completion window. */
const COMPLETION_WINDOW = '24h';
const WINDOW_MS = 24 * 3600 * 1000;

const ID_PARAMS = {
  type: 'object',
  properties: { id: { type: 'string', minLength: 1, maxLength: 128 } },
} as const;

const createBody = {
  type: 'object',
  required: ['input_file_id', 'endpoint', 'completion_window'],
  properties: {
    input_file_id: { type: 'string', minLength: 1, maxLength: 128 },
    endpoint: { type: 'string', maxLength: 256 },
    completion_window: { type: 'string', maxLength: 64 },
    metadata: {
      anyOf: [
        {
          type: 'object',
          maxProperties: 16,
          propertyNames: { maxLength: 64 },
          additionalProperties: { type: 'string', maxLength: 512 },
        },
        { type: 'null' },
      ],
    },
  },
} as const;

interface CreateBody {
  input_file_id: string;
  endpoint: string;
  completion_window: string;
  metadata?: Record<string, string> | null;
}

const authenticated = { auth: true } as const;

export function registerBatchRoutes(v1: FastifyInstance, deps: BatchRouteDeps): void {
  /** Each project's batches are created one after another, so that calls at once cannot pass its bounds together. */
  const creating = new Map<string, Promise<unknown>>();
  v1.post<{ Body: CreateBody }>('/batches', { schema: { body: createBody }, config: { declaration: authenticated } }, async (request) => {
    const project = projectOf(request);
    const turn = (creating.get(project) ?? Promise.resolve()).then(() => create(deps, request));
    const settled = turn.catch(() => {});
    creating.set(project, settled);
    void settled.then(() => {
      if (creating.get(project) === settled) creating.delete(project);
    });
    return turn;
  });

  v1.get<{ Querystring: { after?: string; limit?: string } }>(
    '/batches',
    {
      schema: {
        querystring: {
          type: 'object',
          properties: {
            after: { type: 'string', maxLength: 128 },
            // Query values arrive as text and the app's ajv does not coerce types: 1 to 100, checked by pattern.
            limit: { type: 'string', pattern: '^(100|[1-9][0-9]?)$' },
          },
        },
      },
      config: { declaration: authenticated },
    },
    async (request) => {
      let all = deps.batches.list(projectOf(request));
      if (request.query.after !== undefined) {
        const at = all.findIndex((b) => b.id === request.query.after);
        if (at === -1)
          throw new ApiError('invalid_request_error', `No batch '${request.query.after}' in this project's list.`, { param: 'after' });
        all = all.slice(at + 1);
      }
      const limit = Number(request.query.limit ?? 20);
      const data = all.slice(0, limit).map(batchObject);
      return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: all.length > limit };
    },
  );

  const read = { schema: { params: ID_PARAMS }, config: { declaration: authenticated } };
  v1.get<{ Params: { id: string } }>('/batches/:id', read, async (request) => {
    const record = await deps.batches.fresh((b) => b.get(projectOf(request), request.params.id));
    if (!record) throw notFound(request.params.id);
    return batchObject(record);
  });

  v1.post<{ Params: { id: string } }>('/batches/:id/cancel', read, async (request) => {
    // A batch made through another replica a moment ago is found here too (store: postgres).
    await deps.batches.fresh((b) => b.get(projectOf(request), request.params.id));
    const record = await deps.batches.cancel(projectOf(request), request.params.id);
    if (!record) throw notFound(request.params.id);
    if (record.status !== 'cancelling' && record.status !== 'cancelled' && record.cancellingAt === null) {
      throw new ApiError('conflict', `Batch '${record.id}' has already ended (${record.status}); there is nothing to cancel.`, {
        param: 'id',
      });
    }
    return batchObject(record);
  });
}

function projectOf(request: FastifyRequest): string {
  return request.call.principal!.projectId;
}

function notFound(id: string): ApiError {
  return new ApiError('not_found', `No batch '${id}' for this key's project.`, { param: 'id' });
}

async function create(deps: BatchRouteDeps, request: FastifyRequest<{ Body: CreateBody }>) {
  const body = request.body;
  const project = projectOf(request);
  if (!isBatchUrl(body.endpoint)) {
    throw new ApiError(
      'invalid_request_error',
      `endpoint '${body.endpoint}' is not one a batch runs here; use one of ${Object.keys(BATCH_URLS).join(', ')}.`,
      { param: 'endpoint' },
    );
  }
  if (body.completion_window !== COMPLETION_WINDOW) {
    throw new ApiError('invalid_request_error', `completion_window must be '${COMPLETION_WINDOW}'.`, { param: 'completion_window' });
  }
  const file = await deps.files.fresh((f) => f.get(project, body.input_file_id));
  if (!file) {
    throw new ApiError(
      'not_found',
      `No file '${body.input_file_id}' for this key's project: upload the input with POST /v1/files (purpose 'batch') and use its id.`,
      { param: 'input_file_id' },
    );
  }
  if (file.purpose !== 'batch') {
    throw new ApiError(
      'invalid_request_error',
      `File '${file.id}' has purpose '${file.purpose}'; a batch's input is a file uploaded with purpose 'batch'.`,
      {
        param: 'input_file_id',
      },
    );
  }
  // A batch's output and error files are written whatever room the project has left, so both its room and the number
  // of its batches running at once are checked here: together they bound what its batches can write. An output is
  // at least about as large as its input (every line answered with its custom_id), so that much room must be left.
  const { maxBytesPerProject } = deps.config.files;
  const used = deps.files.usedBytes(project);
  if (used + file.bytes > maxBytesPerProject) {
    throw new ApiError(
      'payload_too_large',
      `This project's files already hold ${used} of the ${maxBytesPerProject} bytes it may keep (files.maxBytesPerProject), so this batch's output (about as large as its input of ${file.bytes} bytes, or larger) would have no room. Delete files it no longer needs (DELETE /v1/files/{id}), then create the batch.`,
      { param: 'input_file_id' },
    );
  }
  const { maxOpenPerProject } = deps.config.batches;
  const open = deps.batches.unfinishedCount(project);
  if (open >= maxOpenPerProject) {
    throw new ApiError(
      'rate_limit_exceeded',
      `This project has ${open} batches that have not ended, as many as it may (batches.maxOpenPerProject). Wait for one to end, or cancel one (POST /v1/batches/{id}/cancel), then retry.`,
      { headers: { 'retry-after': '60' } },
    );
  }
  return createRecord(deps, request, project, file.id);
}

async function createRecord(deps: BatchRouteDeps, request: FastifyRequest<{ Body: CreateBody }>, project: string, fileId: string) {
  const body = request.body;
  // Kept with the batch and answered back: scrubbed, its replacements counted in this call's audit entry.
  const session = new ScrubSession();
  const metadata = body.metadata
    ? Object.fromEntries(Object.entries(body.metadata).map(([k, v]) => [session.scrub(k), session.scrub(v)]))
    : null;
  request.call.redactions = session.counts();
  const record = await deps.batches.create(
    project,
    request.call.principal!.keyId,
    {
      inputFileId: fileId,
      lines: deps.files.lineCount(project, fileId) ?? 0,
      endpoint: body.endpoint,
      completionWindow: body.completion_window,
      metadata,
    },
    WINDOW_MS,
  );
  request.log.info({ batch: record.id, file: fileId, lines: record.total }, 'batch created');
  return batchObject(record);
}
