// POST /v1/documents as multipart/form-data: one `file` part (txt, md, html or pdf) and the same fields as the JSON
// form (`knowledge_base`, `filename`, `metadata` as a JSON object in a string). The file is read into memory up to
// documents.maxUploadBytes, its text extracted, and the bytes dropped: the original upload is never stored.
import { createHash } from 'node:crypto';
import { Transform } from 'node:stream';
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { extractText, ExtractionError, formatOf } from '../../documents/index.js';
import { ApiError } from '../../errors/index.js';

export interface Upload {
  fields: Record<string, string>;
  filename: string | null;
  text: string;
}

const FIELDS = ['knowledge_base', 'filename', 'metadata'];

/** Accepts multipart bodies in this scope only, and digests their raw bytes for the audit entry as they arrive. */
export async function acceptUploads(scope: FastifyInstance, maxUploadBytes: number): Promise<void> {
  await scope.register(multipart, {
    limits: { fileSize: maxUploadBytes, files: 1, fields: 16, fieldSize: 64 * 1024, parts: 17, headerPairs: 100 },
    throwFileSizeLimit: true,
  });
  scope.addHook('preParsing', async (request, _reply, payload) => {
    if (!request.isMultipart()) return payload;
    const hash = createHash('sha256');
    return payload.pipe(
      new Transform({
        transform(chunk: Buffer, _encoding, done) {
          hash.update(chunk);
          done(null, chunk);
        },
        flush(done) {
          request.call.requestSha256 = hash.digest('hex');
          done();
        },
      }),
    );
  });
}

/** The upload's fields and the text of its file; 400/413/415 in OpenAI's shape for what cannot be used. */
export async function readUpload(request: FastifyRequest, maxUploadBytes: number): Promise<Upload> {
  const fields: Record<string, string> = {};
  let file: { filename: string; mimetype: string; bytes: Buffer } | null = null;
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
        if (!FIELDS.includes(part.fieldname)) {
          throw new ApiError('invalid_request_error', `Unknown field '${part.fieldname}'; the fields are file, ${FIELDS.join(', ')}.`, {
            param: part.fieldname,
          });
        }
        if (part.valueTruncated) {
          throw new ApiError('payload_too_large', `The field '${part.fieldname}' is longer than 64 KiB.`, { param: part.fieldname });
        }
        fields[part.fieldname] = String(part.value);
      }
    }
  } catch (err) {
    throw uploadError(err, maxUploadBytes);
  }
  if (!file) throw new ApiError('invalid_request_error', "The upload has no file: send it in a part named 'file'.", { param: 'file' });
  const format = formatOf(file.filename || null, file.mimetype || null);
  if (!format) {
    throw new ApiError(
      'unsupported_media_type',
      `'${file.filename}' (${file.mimetype}) is not a supported document: upload text (.txt), Markdown (.md), HTML (.html) or PDF (.pdf).`,
      { param: 'file' },
    );
  }
  try {
    const text = await extractText(file.bytes, format);
    return { fields, filename: file.filename || null, text };
  } catch (err) {
    if (err instanceof ExtractionError) throw new ApiError('invalid_request_error', err.message, { param: 'file' });
    throw err;
  }
}

function uploadError(err: unknown, maxUploadBytes: number): unknown {
  if (err instanceof ApiError) return err;
  const code = (err as { code?: string }).code;
  if (code === 'FST_REQ_FILE_TOO_LARGE') {
    return new ApiError(
      'payload_too_large',
      `The file is larger than ${maxUploadBytes} bytes (documents.maxUploadBytes). Split it or ask the operator to raise the limit.`,
      { param: 'file' },
    );
  }
  if (code === 'FST_FILES_LIMIT' || code === 'FST_PARTS_LIMIT' || code === 'FST_FIELDS_LIMIT') {
    return new ApiError(
      'invalid_request_error',
      'Too many parts: send one file and at most the fields knowledge_base, filename, metadata.',
    );
  }
  const message = err instanceof Error ? err.message : String(err);
  if (code === 'FST_INVALID_MULTIPART_CONTENT_TYPE' || /multipart|boundary/i.test(message)) {
    return new ApiError('invalid_request_error', `The multipart body cannot be read: ${message}. Send multipart/form-data.`);
  }
  return err;
}
