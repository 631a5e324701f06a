// /v1/documents: ingest text into a project's knowledge base (scrubbed by the pipeline's scrub stage before this
// handler sees it: content, filename and every string in metadata), list, read and delete documents, and query a
// knowledge base. Retrieval is lexical (BM25 over Arabic- and English-normalised terms) for now; answers from a chat
// model and vector retrieval are not built yet (see docs/documents.md).
import type { FastifyInstance } from 'fastify';
import { DocumentLibrary, LibraryError, type DocumentRecord } from '../../documents/index.js';
import { ApiError } from '../../errors/index.js';
import type { ScrubSession } from '../../scrub/index.js';
import type { RouteDeclaration } from '../context.js';
import type { PipelineDeps } from '../pipeline.js';

interface IngestBody {
  knowledge_base: string;
  content: string;
  filename?: string;
  metadata?: Record<string, unknown>;
}

interface QueryBody {
  knowledge_base: string;
  query: string;
  model?: string;
  top_k?: number;
}

const knowledgeBase = {
  type: 'string',
  pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$',
  description: 'letters, digits, dot, dash, underscore; up to 64',
} as const;

const ingestBody = {
  type: 'object',
  required: ['knowledge_base', 'content'],
  additionalProperties: false,
  properties: {
    knowledge_base: knowledgeBase,
    content: { type: 'string', minLength: 1 },
    filename: { type: 'string', minLength: 1, maxLength: 255 },
    metadata: { type: 'object', maxProperties: 64 },
  },
} as const;

const queryBody = {
  type: 'object',
  required: ['knowledge_base', 'query'],
  additionalProperties: false,
  properties: {
    knowledge_base: knowledgeBase,
    query: { type: 'string', minLength: 1, maxLength: 8192 },
    model: { type: 'string', minLength: 1 },
    top_k: { type: 'integer', minimum: 1, maximum: 50 },
  },
} as const;

const listQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { knowledge_base: knowledgeBase },
} as const;

/** Every string a stored document keeps: content, filename, and the strings anywhere in metadata. */
function scrubDocument(raw: unknown, session: ScrubSession): void {
  const body = raw as IngestBody;
  body.content = session.scrub(body.content);
  if (body.filename) body.filename = session.scrub(body.filename);
  const walk = (value: unknown, depth: number): unknown => {
    if (depth > 8) throw new ApiError('invalid_request_error', 'metadata is nested too deeply (at most 8 levels).', { param: 'metadata' });
    if (typeof value === 'string') return session.scrub(value);
    if (Array.isArray(value)) return value.map((v) => walk(v, depth + 1));
    if (value && typeof value === 'object')
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [session.scrub(k), walk(v, depth + 1)]));
    return value;
  };
  if (body.metadata) body.metadata = walk(body.metadata, 0) as Record<string, unknown>;
}

function scrubQuery(raw: unknown, session: ScrubSession): void {
  const body = raw as QueryBody;
  body.query = session.scrub(body.query);
}

function documentObject(d: DocumentRecord) {
  return {
    id: d.id,
    object: 'document',
    knowledge_base: d.knowledgeBase,
    filename: d.filename,
    metadata: d.metadata,
    created_at: d.createdAt,
    chunks: d.chunkIds.length,
    characters: d.characters,
    redactions: d.redactions,
  };
}

function libraryError(err: unknown): never {
  if (err instanceof LibraryError) {
    throw new ApiError(err.status === 413 ? 'payload_too_large' : err.status === 404 ? 'not_found' : 'invalid_request_error', err.message, {
      param: err.param,
    });
  }
  throw err;
}

export function registerDocumentRoutes(v1: FastifyInstance, deps: PipelineDeps): void {
  const library = (): DocumentLibrary => {
    if (!deps.documents) throw new ApiError('operation_unavailable', 'This server keeps no documents.');
    return deps.documents;
  };
  const ingest: RouteDeclaration = { auth: true, scrub: scrubDocument };
  const query: RouteDeclaration = { auth: true, scrub: scrubQuery };
  const authenticated: RouteDeclaration = { auth: true };

  v1.post<{ Body: IngestBody }>('/documents', { schema: { body: ingestBody }, config: { declaration: ingest } }, async (request, reply) => {
    const body = request.body;
    try {
      const record = await library().add(request.call.principal!.projectId, {
        knowledgeBase: body.knowledge_base,
        content: body.content,
        filename: body.filename ?? null,
        metadata: body.metadata ?? null,
        redactions: request.call.redactions!,
      });
      request.log.info({ document: record.id, chunks: record.chunkIds.length }, 'document ingested');
      return reply.code(201).send(documentObject(record));
    } catch (err) {
      libraryError(err);
    }
  });

  v1.get<{ Querystring: { knowledge_base?: string } }>(
    '/documents',
    { schema: { querystring: listQuery }, config: { declaration: authenticated } },
    async (request) => ({
      object: 'list',
      data: library().list(request.call.principal!.projectId, request.query.knowledge_base).map(documentObject),
    }),
  );

  v1.get<{ Params: { id: string } }>('/documents/:id', { config: { declaration: authenticated } }, async (request) => {
    const record = library().get(request.call.principal!.projectId, request.params.id);
    if (!record) throw new ApiError('not_found', `No document '${request.params.id}' in this key's project.`, { param: 'id' });
    return documentObject(record);
  });

  v1.delete<{ Params: { id: string } }>('/documents/:id', { config: { declaration: authenticated } }, async (request) => {
    const removed = await library().remove(request.call.principal!.projectId, request.params.id);
    if (!removed) throw new ApiError('not_found', `No document '${request.params.id}' in this key's project.`, { param: 'id' });
    return { id: request.params.id, object: 'document.deleted', deleted: true };
  });

  v1.post<{ Body: QueryBody }>('/documents/query', { schema: { body: queryBody }, config: { declaration: query } }, async (request) => {
    const body = request.body;
    const project = request.call.principal!.projectId;
    if (body.model !== undefined) {
      throw new ApiError(
        'invalid_request_error',
        'Answers from a chat model over documents are not available on this server yet; omit model to get the ranked passages.',
        { param: 'model' },
      );
    }
    if (!library().list(project, body.knowledge_base).length) {
      throw new ApiError('not_found', `No knowledge base '${body.knowledge_base}' in this key's project (it has no documents).`, {
        param: 'knowledge_base',
      });
    }
    const hits = library().search(project, body.knowledge_base, body.query, body.top_k ?? 5);
    return {
      object: 'documents.query',
      knowledge_base: body.knowledge_base,
      query: body.query,
      retrieval: 'lexical',
      answer: null,
      citations: hits.map((h) => ({ document_id: h.documentId, filename: h.filename, chunk: h.chunk, score: h.score, text: h.text })),
    };
  });
}
