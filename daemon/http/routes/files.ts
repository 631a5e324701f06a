// /v1/files: the Batch API's files. An upload (multipart: `file`, `purpose: "batch"`) is a batch input file, JSON
// Lines, checked whole (a 400 names the first line that is wrong) and scrubbed line by line as it is stored: each
// line's body as its endpoint scrubs an interactive call, so no raw personal data reaches the disk, and the counts of
// what was replaced go into the upload's audit entry. Files are listed, read, downloaded and deleted by their
// project's keys only (another project's is 404), count against the project's room, and expire.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Ajv, type ValidateFunction } from 'ajv';
import type { Config } from '../../config/index.js';
import { ApiError } from '../../errors/index.js';
import { ScrubSession } from '../../scrub/index.js';
import {
  parseBatchFile,
  QuotaExceeded,
  scrubLines,
  type BatchStore,
  type BatchUrl,
  type FileObject,
  type FileStore,
} from '../../batches/index.js';
import { toApiError } from '../errors.js';
import { acceptUploads, readParts } from '../multipart.js';
import { chatCompletionBody, completionBody, embeddingsBody, responsesBody } from './schemas.js';

export interface FileRouteDeps {
  config: Config;
  files: FileStore;
  batches: BatchStore;
}

/** The purposes OpenAI's API knows; only `batch` is kept here (outputs are the daemon's own, `batch_output`). */
const OTHER_PURPOSES = ['assistants', 'fine-tune', 'vision', 'user_data', 'evals', 'batch_output'];

const ID_PARAMS = {
  type: 'object',
  properties: { id: { type: 'string', minLength: 1, maxLength: 128 } },
} as const;

const authenticated = { auth: true } as const;

/** Each endpoint's request schema, as the route itself checks a body: a line is checked so before it is stored. */
const bodyChecks = (() => {
  const ajv = new Ajv({ allErrors: false, coerceTypes: false, useDefaults: false, strict: false });
  const checks: Record<BatchUrl, ValidateFunction> = {
    '/v1/chat/completions': ajv.compile(chatCompletionBody),
    '/v1/completions': ajv.compile(completionBody),
    '/v1/responses': ajv.compile(responsesBody),
    '/v1/embeddings': ajv.compile(embeddingsBody),
  };
  return checks;
})();

/** What is wrong with a line's body as its endpoint sees it (the message the endpoint would answer), or null. */
function checkBody(url: BatchUrl, body: unknown): string | null {
  const check = bodyChecks[url];
  if (check(body)) return null;
  const error = toApiError(Object.assign(new Error('body failed validation'), { validation: check.errors ?? [] }) as never, 0);
  return `body: ${error.message}`;
}

export function registerFileRoutes(v1: FastifyInstance, deps: FileRouteDeps): void {
  // Multipart is accepted on the upload route only.
  void v1.register(async (scope) => {
    await acceptUploads(scope, deps.config.files.maxBytes);
    scope.post('/files', { config: { declaration: authenticated } }, (request, reply) => upload(deps, request, reply));
  });

  v1.get<{ Querystring: ListQuery }>(
    '/files',
    {
      schema: {
        querystring: {
          type: 'object',
          properties: {
            purpose: { type: 'string', maxLength: 64 },
            // Query values arrive as text and the app's ajv does not coerce types: 1 to 10000, checked by pattern.
            limit: { type: 'string', pattern: '^(10000|[1-9][0-9]{0,3})$' },
            after: { type: 'string', maxLength: 128 },
            order: { enum: ['asc', 'desc'] },
          },
        },
      },
      config: { declaration: authenticated },
    },
    async (request) => listPage(deps.files.list(projectOf(request), request.query.purpose), request.query),
  );

  const read = { schema: { params: ID_PARAMS }, config: { declaration: authenticated } };
  v1.get<{ Params: { id: string } }>('/files/:id', read, async (request) => {
    const file = await deps.files.fresh((f) => f.get(projectOf(request), request.params.id));
    if (!file) throw notFound(request.params.id);
    return file;
  });

  v1.get<{ Params: { id: string } }>('/files/:id/content', read, async (request, reply) => {
    // A file written through another replica a moment ago (an upload, a batch's output) is found here too.
    await deps.files.fresh((f) => f.get(projectOf(request), request.params.id));
    const content = await deps.files.content(projectOf(request), request.params.id);
    if (!content) throw notFound(request.params.id);
    return reply.type('application/octet-stream').send(content);
  });

  v1.delete<{ Params: { id: string } }>('/files/:id', read, async (request) => {
    const project = projectOf(request);
    const id = request.params.id;
    if ((await deps.files.fresh((f) => f.get(project, id))) && deps.batches.inUse(project, id)) {
      throw new ApiError(
        'conflict',
        `File '${id}' is the input of a batch that has not ended. Cancel the batch (POST /v1/batches/{id}/cancel) and wait until it is cancelled, then delete the file.`,
        { param: 'id' },
      );
    }
    if (!(await deps.files.delete(project, id))) throw notFound(id);
    return { id, object: 'file', deleted: true };
  });
}

function projectOf(request: FastifyRequest): string {
  return request.call.principal!.projectId;
}

function notFound(id: string): ApiError {
  return new ApiError(
    'not_found',
    `No file '${id}' for this key's project: it was never uploaded here, belongs to another project, expired or was deleted.`,
    {
      param: 'id',
    },
  );
}

/** POST /v1/files: the upload checked, scrubbed and stored; its object, once it is on disk. */
async function upload(deps: FileRouteDeps, request: FastifyRequest, reply: FastifyReply) {
  if (!request.isMultipart()) {
    throw new ApiError('unsupported_media_type', "Upload the file as multipart/form-data, with the parts 'file' and 'purpose'.");
  }
  const { config, files } = deps;
  const { fields, file } = await readParts(request, {
    fields: ['purpose', 'expires_after[anchor]', 'expires_after[seconds]'],
    maxFileBytes: config.files.maxBytes,
    limitKey: 'files.maxBytes',
  });
  checkPurpose(fields.purpose);
  const ttlSeconds = expiresAfter(fields, config.files.ttlSeconds);
  const parsed = await parseBatchFile(file.bytes, { maxLines: config.batches.maxLines, maxBodyBytes: config.limits.bodyBytes, checkBody });
  const { lines, redactions } = await scrubLines(parsed);
  // The name is kept and listed: scrubbed too.
  const names = new ScrubSession();
  const filename = names.scrub((file.filename || 'batch.jsonl').slice(0, 255));
  for (const [type, n] of Object.entries(names.counts())) redactions[type as keyof typeof redactions] += n;
  // Counted in the upload's audit entry, as every call's replacements are.
  request.call.redactions = redactions;
  let stored: FileObject;
  try {
    stored = await files.create(
      projectOf(request),
      { filename, purpose: 'batch', lines },
      ttlSeconds === null ? undefined : ttlSeconds * 1000,
    );
  } catch (err) {
    if (err instanceof QuotaExceeded) {
      throw new ApiError(
        'payload_too_large',
        `This project's files already hold ${err.used} of the ${err.limit} bytes it may keep (files.maxBytesPerProject), and this file needs ${err.wanted}. Delete files it no longer needs (DELETE /v1/files/{id}), or ask the operator for more room.`,
        { param: 'file' },
      );
    }
    throw err;
  }
  request.log.info({ file: stored.id, lines: lines.length, bytes: stored.bytes }, 'batch input file stored');
  return reply.send(stored);
}

function checkPurpose(purpose: string | undefined): void {
  if (purpose === 'batch') return;
  if (purpose === undefined) {
    throw new ApiError('invalid_request_error', "Missing required parameter 'purpose': send purpose 'batch'.", { param: 'purpose' });
  }
  const known = OTHER_PURPOSES.includes(purpose);
  throw new ApiError(
    'invalid_request_error',
    known
      ? `Files with purpose '${purpose}' are not kept here: this deployment keeps files for the Batch API only. Send purpose 'batch'.`
      : `Unknown purpose '${purpose}'. Send purpose 'batch' (the only one this deployment keeps files for).`,
    { param: 'purpose' },
  );
}

/** OpenAI's `expires_after` (anchor `created_at`, seconds): the file's own time to live, at most files.ttlSeconds. */
function expiresAfter(fields: Record<string, string>, maxSeconds: number): number | null {
  const anchor = fields['expires_after[anchor]'];
  const raw = fields['expires_after[seconds]'];
  if (anchor === undefined && raw === undefined) return null;
  if (anchor !== 'created_at') {
    throw new ApiError('invalid_request_error', "expires_after.anchor must be 'created_at'.", { param: 'expires_after.anchor' });
  }
  const seconds = Number(raw);
  if (!/^\d+$/.test(raw ?? '') || seconds < 1 || seconds > maxSeconds) {
    throw new ApiError(
      'invalid_request_error',
      `expires_after.seconds must be a whole number from 1 to ${maxSeconds} (files.ttlSeconds, the longest a file is kept here).`,
      { param: 'expires_after.seconds' },
    );
  }
  return seconds;
}

interface ListQuery {
  purpose?: string;
  limit?: string;
  after?: string;
  order?: 'asc' | 'desc';
}

/** OpenAI's list page of files: newest first unless asked, `after` a file's id, at most `limit` (10000). */
function listPage(all: FileObject[], query: ListQuery) {
  let ordered = query.order === 'asc' ? all : [...all].reverse();
  if (query.after !== undefined) {
    const at = ordered.findIndex((f) => f.id === query.after);
    if (at === -1) throw new ApiError('invalid_request_error', `No file '${query.after}' in this project's list.`, { param: 'after' });
    ordered = ordered.slice(at + 1);
  }
  const limit = Number(query.limit ?? 10000);
  const data = ordered.slice(0, limit);
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: ordered.length > limit };
}
