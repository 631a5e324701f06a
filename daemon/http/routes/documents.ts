// /v1/documents: ingest a document into a project's knowledge base (JSON text, or a multipart upload whose text is
// extracted first; scrubbed before anything else sees it: content, filename and every string in metadata), list,
// read and delete documents, and query a knowledge base: lexical and vector retrieval fused, then an answer from a
// chat model that cites the passages, in the question's language (docs/documents.md).
import { Ajv } from 'ajv';
import type { EngineRegistry } from '../../engines/index.js';
import type { Config } from '../../config/index.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { answerPrompt, DocumentLibrary, LibraryError, type DocumentRecord, type Embedder } from '../../documents/index.js';
import { ApiError } from '../../errors/index.js';
import type { ServedModel, ModelCatalog } from '../../models/index.js';
import { noRedactions, ScrubSession } from '../../scrub/index.js';
import { noteModelUsed, startedEngineWork, type RouteDeclaration } from '../context.js';
import { abortOnDisconnect } from '../lifetime.js';
import { scrubRequest } from '../stages/scrub.js';
import { acceptUploads } from '../multipart.js';
import { ticketFor, type TicketDeps } from '../tickets.js';
import { readUpload } from './document-upload.js';

/** What the document routes need. */
export interface DocumentRouteDeps extends TicketDeps {
  config: Config;
  catalog: ModelCatalog;
  engines: EngineRegistry;
  /** Knowledge bases and their documents. */
  documents: DocumentLibrary;
}

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
  max_tokens?: number;
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
    max_tokens: { type: 'integer', minimum: 1, maximum: 8192 },
  },
} as const;

const listQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { knowledge_base: knowledgeBase },
} as const;

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
    const code = { 400: 'invalid_request_error', 404: 'not_found', 413: 'payload_too_large', 503: 'server_overloaded' } as const;
    throw new ApiError(code[err.status], err.message, { param: err.param });
  }
  throw err;
}

/**
 * The embeddings model that indexes documents: the configured one (whose absence or loading is the caller's 404/503),
 * or the first one served and ready that is not a frontier provider's (a knowledge base leaves the sovereign boundary
 * only when the operator names such a model); null when there is none (lexical retrieval only).
 */
function documentEmbedder(deps: DocumentRouteDeps, request: FastifyRequest): Embedder | null {
  const call = request.call;
  const configured = deps.config.documents.embeddingModel;
  const model = configured
    ? deps.catalog.resolve(configured, 'embeddings')
    : deps.catalog.listed().find((m) => m.capability === 'embeddings' && m.readiness === 'ready' && !m.frontier);
  const engine = model && deps.engines.get('embeddings', model.id);
  if (!model || !engine) return null;
  return {
    model: model.id,
    async embed(texts, signal) {
      noteModelUsed(call, model);
      const ticket = ticketFor(deps, request);
      const result = await engine.embed(model.id, texts, signal ?? new AbortController().signal, { truncate: true, ticket });
      return result.vectors;
    },
  };
}

/**
 * The chat model that answers a query: the one it names, else the first chat model served and ready that is not a
 * frontier provider's, else none.
 */
function answeringModel(deps: DocumentRouteDeps, named: string | undefined): ServedModel | null {
  if (named !== undefined) return deps.catalog.resolve(named, 'chat');
  return (
    deps.catalog
      .listed()
      .find((m) => m.capability === 'chat' && m.readiness === 'ready' && !m.frontier && deps.engines.get('chat', m.id)) ?? null
  );
}

const ANSWER_TOKENS = 512;

const validateIngest = new Ajv({ allErrors: false }).compile(ingestBody);

/** Checks an ingestion body against the schema; a failure is reported exactly as fastify's own validation is. */
function checkIngest(body: unknown): void {
  if (validateIngest(body)) return;
  throw Object.assign(new Error('body failed validation'), {
    statusCode: 400,
    validation: validateIngest.errors,
    validationContext: 'body',
  });
}

/** A multipart upload's fields and extracted text, checked like the JSON form and scrubbed as stage 7 would. */
async function uploadedDocument(
  request: FastifyRequest,
  deps: DocumentRouteDeps,
  library: DocumentLibrary,
  signal: AbortSignal,
): Promise<IngestBody> {
  const upload = await readUpload(request, deps.config.documents.maxUploadBytes, (bytes, format) => library.extract(bytes, format, signal));
  let metadata: unknown;
  if (upload.fields.metadata !== undefined) {
    try {
      metadata = JSON.parse(upload.fields.metadata);
    } catch {
      throw new ApiError('invalid_request_error', 'metadata must be a JSON object, sent as a string field.', { param: 'metadata' });
    }
  }
  const filename = upload.fields.filename ?? upload.filename;
  const body: IngestBody = {
    knowledge_base: upload.fields.knowledge_base as string,
    content: upload.text,
    ...(filename ? { filename } : {}),
    ...(metadata !== undefined ? { metadata: metadata as Record<string, unknown> } : {}),
  };
  if (!body.content.trim()) throw new ApiError('invalid_request_error', 'The file has no text to index.', { param: 'file' });
  checkIngest(body);
  request.call.bodyBytes = Buffer.byteLength(body.content);
  await scrubRequest(request, 'document', body);
  return body;
}

export function registerDocumentRoutes(v1: FastifyInstance, deps: DocumentRouteDeps): void {
  const library = deps.documents;
  const ingest: RouteDeclaration = { auth: true, scrub: 'document' };
  // On metered postures the answer's tokens count like a chat call's: the question and the longest answer are
  // reserved up front, and the call settles at what the model really used, passages included (nothing when no model
  // answers). The passages are not reserved: how many fit is only known once they are retrieved.
  const query: RouteDeclaration = {
    auth: true,
    scrub: 'query',
    tokens: (raw) => Buffer.byteLength((raw as QueryBody).query) + ((raw as QueryBody).max_tokens ?? ANSWER_TOKENS),
  };
  const authenticated: RouteDeclaration = { auth: true };

  // Multipart is accepted on this route only; the body schema applies to the JSON form, and an upload is checked
  // against the same schema once its text is extracted.
  void v1.register(async (scope) => {
    await acceptUploads(scope, deps.config.documents.maxUploadBytes);
    // Before the scrub stage (preHandler), which must only ever see a body of the right shape.
    scope.addHook('preValidation', async (request) => {
      if (!request.isMultipart()) checkIngest(request.body);
    });
    scope.post('/documents', { config: { declaration: ingest } }, (request, reply) => ingestDocument(deps, request, reply));
  });
  v1.get<{ Querystring: { knowledge_base?: string } }>(
    '/documents',
    { schema: { querystring: listQuery }, config: { declaration: authenticated } },
    async (request) => ({
      object: 'list',
      data: library.list(request.call.principal!.projectId, request.query.knowledge_base).map(documentObject),
    }),
  );

  v1.get<{ Params: { id: string } }>('/documents/:id', { config: { declaration: authenticated } }, async (request) => {
    const record = await library.fresh((l) => l.get(request.call.principal!.projectId, request.params.id));
    if (!record) throw new ApiError('not_found', `No document '${request.params.id}' in this key's project.`, { param: 'id' });
    return documentObject(record);
  });

  v1.delete<{ Params: { id: string } }>('/documents/:id', { config: { declaration: authenticated } }, async (request) => {
    await library.fresh((l) => l.get(request.call.principal!.projectId, request.params.id));
    const removed = await library.remove(request.call.principal!.projectId, request.params.id);
    if (!removed) throw new ApiError('not_found', `No document '${request.params.id}' in this key's project.`, { param: 'id' });
    return { id: request.params.id, object: 'document.deleted', deleted: true };
  });

  v1.post<{ Body: QueryBody }>('/documents/query', { schema: { body: queryBody }, config: { declaration: query } }, (request, reply) =>
    queryDocuments(deps, request, reply),
  );
}

/** POST /v1/documents: the document (JSON, or an upload whose text is extracted) is chunked, embedded and stored. */
async function ingestDocument(deps: DocumentRouteDeps, request: FastifyRequest, reply: FastifyReply) {
  const library = deps.documents;
  const signal = abortOnDisconnect(request, reply);
  const body = request.isMultipart() ? await uploadedDocument(request, deps, library, signal) : (request.body as IngestBody);
  try {
    const started = Date.now();
    const record = await library.add(
      request.call.principal!.projectId,
      {
        knowledgeBase: body.knowledge_base,
        content: body.content,
        filename: body.filename ?? null,
        metadata: body.metadata ?? null,
        redactions: request.call.redactions ?? noRedactions(),
      },
      documentEmbedder(deps, request),
      signal,
    );
    request.log.info({ document: record.id, chunks: record.chunkIds.length, ms: Date.now() - started }, 'document ingested');
    return reply.code(201).send(documentObject(record));
  } catch (err) {
    libraryError(err);
  }
}

/** POST /v1/documents/query: the passages that match, and an answer from a chat model quoting them when one is served. */
async function queryDocuments(deps: DocumentRouteDeps, request: FastifyRequest<{ Body: QueryBody }>, reply: FastifyReply) {
  const library = deps.documents;
  const body = request.body;
  const project = request.call.principal!.projectId;
  const model = answeringModel(deps, body.model);
  if (!library.count(project, body.knowledge_base)) {
    throw new ApiError('not_found', `No knowledge base '${body.knowledge_base}' in this key's project (it has no documents).`, {
      param: 'knowledge_base',
    });
  }
  const signal = abortOnDisconnect(request, reply);
  const { retrieval, hits } = await library.search(
    project,
    body.knowledge_base,
    body.query,
    body.top_k ?? 5,
    documentEmbedder(deps, request),
    signal,
  );
  const citations = hits.map((h, i) => ({
    index: i + 1,
    document_id: h.documentId,
    filename: h.filename,
    chunk: h.chunk,
    score: h.score,
    text: h.text,
  }));
  const result = {
    object: 'documents.query',
    knowledge_base: body.knowledge_base,
    query: body.query,
    retrieval,
    model: null as string | null,
    answer: null as string | null,
    citations,
  };
  const engine = model && deps.engines.get('chat', model.id);
  request.call.usedTokens = 0;
  if (!model || !engine || !hits.length) return result;

  const answerTokens = Math.min(body.max_tokens ?? ANSWER_TOKENS, Math.floor((model.contextTokens ?? 4096) / 4));
  const prompt = answerPrompt(body.query, hits, model.contextTokens ?? 4096, answerTokens);
  if (!prompt.quoted) return result;
  const work = engine.chat(
    model.id,
    { messages: prompt.messages, maxTokens: answerTokens, temperature: 0.2 },
    {
      onText: () => {},
      signal,
      onUsage: (u) => {
        request.call.usedTokens = u.promptTokens + u.completionTokens;
        request.call.completionTokens = u.completionTokens;
      },
    },
  );
  startedEngineWork(request.call, model, work);
  const answered = await work;
  // The answer is scrubbed like any chat answer (same placeholders as the query) unless scrub.output is off.
  let answer = answered.content;
  if (deps.config.scrub.output) {
    const tally = noRedactions();
    answer = (request.call.scrubSession ?? new ScrubSession()).scrub(answer, tally);
    request.call.outputRedactions = tally;
  }
  return { ...result, model: model.id, answer, language: prompt.language, citations: citations.slice(0, prompt.quoted) };
}
