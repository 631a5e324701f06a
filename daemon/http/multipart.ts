// multipart/form-data for the routes that take a file (documents, audio): accepted only in the scope that registers
// it, its raw bytes digested for the audit entry as they arrive, one file part read into memory up to a limit, and
// every way a multipart body can be wrong answered in OpenAI's shape.
import { createHash } from 'node:crypto';
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../errors/index.js';

export interface Parts {
  fields: Record<string, string>;
  file: { filename: string; mimetype: string; bytes: Buffer };
}

export interface PartsOptions {
  /** The text fields the route takes, besides `file`. */
  fields: readonly string[];
  maxFileBytes: number;
  /** The config key of the file limit, for the 413's message. */
  limitKey: string;
}

/** Accepts multipart bodies in this scope only, and digests their raw bytes for the audit entry as they arrive. */
export async function acceptUploads(scope: FastifyInstance, maxFileBytes: number): Promise<void> {
  await scope.register(multipart, {
    limits: { fileSize: maxFileBytes, files: 1, fields: 16, fieldSize: 64 * 1024, parts: 17, headerPairs: 100 },
    throwFileSizeLimit: true,
  });
  // After the content-type parser (which marks the request multipart and reads nothing), before the route reads it.
  scope.addHook('preValidation', async (request) => {
    if (!request.isMultipart()) return;
    // @fastify/multipart reads request.raw itself: the digest listens there, beside the parser's pipe. Paused, so that
    // no byte flows before that pipe exists: the pipe starts the flow for both.
    const raw = request.raw;
    const hash = createHash('sha256');
    raw.on('data', (chunk: Buffer) => hash.update(chunk));
    raw.once('end', () => {
      request.call.requestSha256 = hash.digest('hex');
    });
    raw.pause();
  });
}

/** The text fields and the one file of a multipart body; 400/413 in OpenAI's shape for what cannot be used. */
export async function readParts(request: FastifyRequest, options: PartsOptions): Promise<Parts> {
  const fields: Record<string, string> = {};
  let file: Parts['file'] | null = null;
  try {
    for await (const part of request.parts()) {
      if (part.type === 'file') {
        if (part.fieldname !== 'file' || file) {
          part.file.resume();
          throw new ApiError('invalid_request_error', `Send exactly one file, in the part named 'file' (got '${part.fieldname}').`, {
            param: 'file',
          });
        }
        file = { filename: part.filename, mimetype: part.mimetype, bytes: await part.toBuffer() };
      } else {
        if (!options.fields.includes(part.fieldname)) {
          throw new ApiError(
            'invalid_request_error',
            `Unknown field '${part.fieldname}'; the fields are file, ${options.fields.join(', ')}.`,
            {
              param: part.fieldname,
            },
          );
        }
        if (part.valueTruncated) {
          throw new ApiError('payload_too_large', `The field '${part.fieldname}' is longer than 64 KiB.`, { param: part.fieldname });
        }
        // A repeated field (`timestamp_granularities[]`) keeps every value, comma-separated.
        const value = String(part.value);
        fields[part.fieldname] = part.fieldname in fields ? `${fields[part.fieldname]},${value}` : value;
      }
    }
  } catch (err) {
    throw uploadError(err, options);
  }
  if (!file) throw new ApiError('invalid_request_error', "The upload has no file: send it in a part named 'file'.", { param: 'file' });
  return { fields, file };
}

function uploadError(err: unknown, options: PartsOptions): unknown {
  if (err instanceof ApiError) return err;
  const code = (err as { code?: string }).code;
  if (code === 'FST_REQ_FILE_TOO_LARGE') {
    return new ApiError(
      'payload_too_large',
      `The file is larger than ${options.maxFileBytes} bytes (${options.limitKey}). Split it or ask the operator to raise the limit.`,
      { param: 'file' },
    );
  }
  if (code === 'FST_FILES_LIMIT' || code === 'FST_PARTS_LIMIT' || code === 'FST_FIELDS_LIMIT') {
    return new ApiError('invalid_request_error', `Too many parts: send one file and at most the fields ${options.fields.join(', ')}.`);
  }
  const message = err instanceof Error ? err.message : String(err);
  if (code === 'FST_INVALID_MULTIPART_CONTENT_TYPE' || /multipart|boundary/i.test(message)) {
    return new ApiError('invalid_request_error', `The multipart body cannot be read: ${message}. Send multipart/form-data.`);
  }
  return err;
}
