// POST /v1/documents as multipart/form-data: one `file` part (txt, md, html or pdf) and the same fields as the JSON
// form (`knowledge_base`, `filename`, `metadata` as a JSON object in a string). The file is read into memory up to
// documents.maxUploadBytes, its text extracted, and the bytes dropped: the original upload is never stored.
import type { FastifyRequest } from 'fastify';
import { ExtractionError, formatOf, type DocumentFormat } from '../../documents/index.js';
import { ApiError } from '../../errors/index.js';
import { readParts } from '../multipart.js';

export interface Upload {
  fields: Record<string, string>;
  filename: string | null;
  text: string;
}

/** The text of a file in a known format (the document library's extract). */
export type Extract = (bytes: Uint8Array, format: DocumentFormat) => Promise<string>;

const FIELDS = ['knowledge_base', 'filename', 'metadata'];

/** The upload's fields and the text of its file; 400/413/415 in OpenAI's shape for what cannot be used. */
export async function readUpload(request: FastifyRequest, maxUploadBytes: number, extract: Extract): Promise<Upload> {
  const { fields, file } = await readParts(request, { fields: FIELDS, maxFileBytes: maxUploadBytes, limitKey: 'documents.maxUploadBytes' });
  const format = formatOf(file.filename || null, file.mimetype || null);
  if (!format) {
    throw new ApiError(
      'unsupported_media_type',
      `'${file.filename}' (${file.mimetype}) is not a supported document: upload text (.txt), Markdown (.md), HTML (.html) or PDF (.pdf).`,
      { param: 'file' },
    );
  }
  try {
    const text = await extract(file.bytes, format);
    return { fields, filename: file.filename || null, text };
  } catch (err) {
    if (err instanceof ExtractionError) {
      throw new ApiError(err.status === 413 ? 'payload_too_large' : 'invalid_request_error', err.message, { param: 'file' });
    }
    throw err;
  }
}
