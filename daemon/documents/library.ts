// Knowledge bases and their documents, stored in lmdb, already scrubbed (the HTTP layer scrubs before a document
// gets here, and nothing else is ever written). Each knowledge base belongs to one project. Chunks are indexed for
// lexical retrieval (BM25, built per knowledge base from the stored chunks in the background after a start) and, when an
// embeddings model is served, for vector retrieval (vectors.ts); a query uses both and fuses the two rankings.
import { randomBytes } from 'node:crypto';
import type { Database } from 'lmdb';
import type { RedactionCounts } from '../scrub/index.js';
import { findFresh, type SharedChange, type Store } from '../store/index.js';
import { Bm25Index, bestOf } from './bm25.js';
import { chunkText, DEFAULT_CHUNKING } from './chunk.js';
import { DEFAULT_PDF_BUDGET, extractText, PdfWorkers, type DocumentFormat, type PdfBudget } from './extract/index.js';
import { VectorIndexes, type ChunkText, type Embedder, type VectorLog } from './vectors.js';

export interface DocumentRecord {
  id: string;
  project: string;
  knowledgeBase: string;
  filename: string | null;
  metadata: Record<string, unknown> | null;
  createdAt: number;
  /** Chunk ids, in document order. */
  chunkIds: number[];
  redactions: RedactionCounts;
  characters: number;
}

interface ChunkRecord {
  document: string;
  index: number;
  text: string;
}

export interface Hit {
  documentId: string;
  filename: string | null;
  chunk: number;
  score: number;
  text: string;
}

export interface LibraryLimits {
  chunksPerDocument: number;
  documentsPerKnowledgeBase: number;
}

export interface LibraryOptions extends LibraryLimits {
  /** Where the vector graphs are saved (a cache of the vectors stored in lmdb). */
  vectorsDir: string;
  log: VectorLog;
  /** How uploaded PDFs are read (DEFAULT_PDF_BUDGET when not given). */
  pdf?: PdfBudget;
}

export interface SearchResult {
  retrieval: 'lexical' | 'hybrid';
  hits: Hit[];
}

/** Reciprocal rank fusion's constant: large enough that the first few ranks of either list weigh about the same. */
const RRF_K = 60;
/** Chunks indexed per turn of the event loop while building a BM25 index, so that a build never stalls other calls. */
const LEXICAL_PER_TURN = 500;
/** Builds at least this large are logged, with how long they took. */
const LOGGED_BUILD = 20_000;
const yieldTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Chunk ids a replica takes at a time (store: postgres), to give out to the documents added through it. */
const CHUNK_ID_BLOCK = 10_000;

/** Candidates taken from each ranking before fusing, as a multiple of the hits asked for. */
const CANDIDATES_PER_HIT = 4;

/** A request the library refuses, with the HTTP status it means and what to do. */
export class LibraryError extends Error {
  constructor(
    readonly status: 400 | 404 | 413 | 503,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

// Neither a project id nor a knowledge base name holds a '/'. (Not NUL: lmdb's key encoding reads a string with NUL
// in it back as an array, and ranges over such keys miss.)
const kbKey = (project: string, knowledgeBase: string) => `${project}/${knowledgeBase}`;
/** A document's entry in the by-knowledge-base index: sorted by knowledge base, then age, then id. */
const listingKey = (d: DocumentRecord) => `${kbKey(d.project, d.knowledgeBase)}/${String(d.createdAt).padStart(12, '0')}/${d.id}`;

export class DocumentLibrary {
  private readonly documents: Database<DocumentRecord, string>;
  private readonly chunks: Database<ChunkRecord, number>;
  /** listingKey → document id: a knowledge base's documents without reading every document. */
  private readonly listing: Database<string, string>;
  private readonly vectors: VectorIndexes;
  /** BM25 per knowledge base, once built. */
  private readonly indexes = new Map<string, Bm25Index>();
  /** BM25 indexes being built (new and removed chunks are applied to them as well), and the builds' promises. */
  private readonly partialIndexes = new Map<string, Bm25Index>();
  private readonly building = new Map<string, Promise<Bm25Index>>();
  private readonly pdfWorkers: PdfWorkers;
  private closing = false;
  /**
   * With PostgreSQL, the chunk ids this replica has taken and not given out yet, [next, end). Documents added at once,
   * here and through other replicas, do not each read and write the next id: their changes would conflict, and the
   * last ones, run again each time, would give up. Ids left when the process ends are never used; none is used twice.
   */
  private chunkIds = { next: 0, end: 0 };
  private takingChunkIds: Promise<void> | null = null;

  constructor(
    private readonly store: Store,
    private readonly limits: LibraryOptions,
  ) {
    this.documents = store.db<DocumentRecord>('documents');
    this.chunks = store.db<ChunkRecord, number>('document-chunks');
    this.listing = store.db<string>('documents-by-kb');
    this.vectors = new VectorIndexes(store, limits.vectorsDir, (kb) => this.liveChunks(kb), limits.log);
    this.pdfWorkers = new PdfWorkers(limits.pdf ?? DEFAULT_PDF_BUDGET);
    // Documents other replicas add or remove (store: postgres) reach this one's indexes as they reach its copy.
    store.onChange('documents', (changes) => this.followOthers(changes));
  }

  /**
   * At boot: builds every knowledge base's BM25 index from the stored chunks, and loads every saved vector graph
   * (rebuilding damaged ones from the stored vectors). A query that comes first waits for its own knowledge base.
   */
  async open(): Promise<void> {
    // Documents stored before the listing existed.
    if (this.listing.getKeysCount({ limit: 1 }) === 0 && this.documents.getKeysCount({ limit: 1 }) > 0) {
      await this.store.update((tx) => {
        for (const { value } of tx.range<DocumentRecord>('documents')) tx.put('documents-by-kb', listingKey(value), value.id);
      });
    }
    const knowledgeBases = new Set<string>();
    for (const key of this.listing.getKeys()) knowledgeBases.add(key.slice(0, key.indexOf('/', key.indexOf('/') + 1)));
    const lexical = (async () => {
      for (const kb of knowledgeBases) {
        // A shutdown during the builds stops them; that is not a failure to open.
        if (this.closing) return;
        await this.lexicalIndex(kb).catch((err: unknown) => {
          if (!this.closing) throw err;
        });
      }
    })();
    await Promise.all([lexical, this.vectors.openAll()]);
  }

  /** Stops index builds and PDF readers, and saves vector graphs with unsaved changes. */
  async close(): Promise<void> {
    this.closing = true;
    await this.pdfWorkers.close();
    await Promise.allSettled(this.building.values());
    await this.vectors.close();
  }

  /**
   * The text of an uploaded file. A PDF is read in a worker thread, within its time and memory budgets (503 when
   * too many wait); ExtractionError for a file that cannot be used.
   */
  extract(bytes: Uint8Array, format: DocumentFormat, signal: AbortSignal): Promise<string> {
    return format === 'pdf' ? this.pdfWorkers.read(bytes, signal) : extractText(bytes, format);
  }

  /** Chunks and stores a scrubbed document; returns its record. */
  async add(
    project: string,
    input: {
      knowledgeBase: string;
      content: string;
      filename: string | null;
      metadata: Record<string, unknown> | null;
      redactions: RedactionCounts;
    },
    embedder: Embedder | null = null,
    signal?: AbortSignal,
  ): Promise<DocumentRecord> {
    const texts = chunkText(input.content, DEFAULT_CHUNKING);
    if (!texts.length) throw new LibraryError(400, 'The document has no text to index.', 'content');
    if (texts.length > this.limits.chunksPerDocument) {
      throw new LibraryError(
        413,
        `The document makes ${texts.length} chunks; at most ${this.limits.chunksPerDocument} are allowed (documents.maxChunksPerDocument). Split it into smaller documents.`,
        'content',
      );
    }
    if (this.count(project, input.knowledgeBase) >= this.limits.documentsPerKnowledgeBase) {
      throw new LibraryError(
        400,
        `The knowledge base '${input.knowledgeBase}' already holds ${this.limits.documentsPerKnowledgeBase} documents (documents.maxDocumentsPerKnowledgeBase). Delete some or use another knowledge base.`,
        'knowledge_base',
      );
    }
    const id = `doc_${randomBytes(12).toString('hex')}`;
    const kb = kbKey(project, input.knowledgeBase);
    // Embedded before anything is stored, so a document is committed with its vectors or not at all.
    let vectors: Float32Array[] | null = null;
    if (embedder) {
      await this.vectors.prepare(kb, embedder, signal);
      vectors = await this.vectors.embed(
        texts.map((text, i) => ({ id: i, text })),
        embedder,
        id,
        signal,
      );
    }
    const createdAt = Math.floor(Date.now() / 1000);
    const taken = this.store.shared ? await this.takeChunkIds(texts.length) : null;
    const record = await this.store.update((tx) => {
      // On lmdb the ids are taken in the change that stores them; with PostgreSQL from this replica's block.
      let first = taken;
      if (first === null) {
        first = tx.get<number>('documents-meta', 'next-chunk') ?? 0;
        tx.put('documents-meta', 'next-chunk', first + texts.length);
      }
      const chunkIds = texts.map((_, i) => first + i);
      const made: DocumentRecord = {
        id,
        project,
        knowledgeBase: input.knowledgeBase,
        filename: input.filename,
        metadata: input.metadata,
        createdAt,
        chunkIds,
        redactions: input.redactions,
        characters: input.content.length,
      };
      texts.forEach((text, index) => tx.put('document-chunks', chunkIds[index]!, { document: id, index, text }));
      if (vectors) this.vectors.putIn(tx, chunkIds, vectors);
      tx.put('documents-by-kb', listingKey(made), id);
      // Last: a replica that learns of the document (followOthers) holds its chunks and vectors already.
      tx.put('documents', id, made);
      return made;
    });
    const { chunkIds } = record;
    const index = this.indexes.get(kb) ?? this.partialIndexes.get(kb);
    texts.forEach((text, i) => index?.add(chunkIds[i]!, text));
    if (vectors) await this.vectors.insert(kb, chunkIds, vectors);
    else if (this.vectors.modelOf(kb)) await this.vectors.markIncomplete(kb);
    return record;
  }

  /** The first of `n` chunk ids from this replica's block, taking a new block (a change of its own) when it is short. */
  private async takeChunkIds(n: number): Promise<number> {
    while (this.chunkIds.end - this.chunkIds.next < n) {
      this.takingChunkIds ??= this.store
        .update((tx) => {
          const first = tx.get<number>('documents-meta', 'next-chunk') ?? 0;
          const count = Math.max(n, CHUNK_ID_BLOCK);
          tx.put('documents-meta', 'next-chunk', first + count);
          return { next: first, end: first + count };
        })
        .then((block) => {
          this.chunkIds = block;
        })
        .finally(() => {
          this.takingChunkIds = null;
        });
      await this.takingChunkIds;
    }
    const first = this.chunkIds.next;
    this.chunkIds.next += n;
    return first;
  }

  /** Indexes the documents other replicas added, and unindexes those they removed. */
  private followOthers(changes: SharedChange[]): void {
    for (const { value, previous } of changes) {
      const added = value as DocumentRecord | undefined;
      const removed = previous as DocumentRecord | undefined;
      if (removed && !added) {
        const kb = kbKey(removed.project, removed.knowledgeBase);
        const index = this.indexes.get(kb) ?? this.partialIndexes.get(kb);
        for (const chunkId of removed.chunkIds) index?.remove(chunkId);
        void this.vectors.forget(kb, removed.chunkIds);
      } else if (added && !removed) {
        const kb = kbKey(added.project, added.knowledgeBase);
        const index = this.indexes.get(kb) ?? this.partialIndexes.get(kb);
        for (const chunkId of added.chunkIds) {
          const chunk = this.chunks.get(chunkId);
          if (chunk && index && !index.has(chunkId)) index.add(chunkId, chunk.text);
        }
        void this.vectors.insertStored(kb, added.chunkIds);
      }
    }
  }

  /** The project's documents in a knowledge base (or in all of its knowledge bases), oldest first. */
  list(project: string, knowledgeBase?: string): DocumentRecord[] {
    const out: DocumentRecord[] = [];
    for (const id of this.listing.getRange(this.rangeOf(project, knowledgeBase)).map(({ value }) => value)) {
      const record = this.documents.get(id);
      if (record) out.push(record);
    }
    // Within one knowledge base the keys are already in this order; across them, not.
    return knowledgeBase === undefined ? out.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id)) : out;
  }

  /** How many documents the knowledge base holds. */
  count(project: string, knowledgeBase: string): number {
    return this.listing.getKeysCount(this.rangeOf(project, knowledgeBase));
  }

  private rangeOf(project: string, knowledgeBase?: string): { start: string; end: string } {
    const prefix = knowledgeBase === undefined ? `${project}/` : `${kbKey(project, knowledgeBase)}/`;
    return { start: prefix, end: `${prefix}\uffff` };
  }

  /**
   * `find` on this replica's copy, and on a miss once more after catching up (store: postgres), so a document added
   * through another replica a moment ago is found here.
   */
  fresh<T>(find: (library: this) => T): Promise<T> {
    return findFresh(this.store, () => find(this));
  }

  /** A document of this project, or undefined (another project's document is not told apart from none). */
  get(project: string, id: string): DocumentRecord | undefined {
    const record = this.documents.get(id);
    return record?.project === project ? record : undefined;
  }

  /** Removes the document, its chunks and its index entries. */
  async remove(project: string, id: string): Promise<boolean> {
    const record = this.get(project, id);
    if (!record) return false;
    const removed = await this.store.update((tx) => {
      // Read in the change: a document removed at once on two replicas is removed (and unindexed) once.
      if (!tx.get('documents', id)) return false;
      for (const chunkId of record.chunkIds) tx.remove('document-chunks', chunkId);
      this.vectors.dropIn(tx, record.chunkIds);
      tx.remove('documents-by-kb', listingKey(record));
      tx.remove('documents', id);
      return true;
    });
    if (!removed) return false;
    const kb = kbKey(project, record.knowledgeBase);
    const index = this.indexes.get(kb) ?? this.partialIndexes.get(kb);
    for (const chunkId of record.chunkIds) index?.remove(chunkId);
    await this.vectors.forget(kb, record.chunkIds);
    return true;
  }

  /**
   * The best chunks of the knowledge base for the (scrubbed) query: BM25 alone, or fused by reciprocal rank with
   * the nearest vectors when an embeddings model is served and the knowledge base holds its vectors.
   */
  async search(
    project: string,
    knowledgeBase: string,
    query: string,
    topK: number,
    embedder: Embedder | null = null,
    signal?: AbortSignal,
  ): Promise<SearchResult> {
    const kb = kbKey(project, knowledgeBase);
    const candidates = Math.max(topK * CANDIDATES_PER_HIT, 20);
    const lexical = (await this.lexicalIndex(kb)).search(query, candidates);
    const nearest = embedder ? await this.vectors.search(kb, embedder, query, candidates, signal) : null;
    if (!nearest) return { retrieval: 'lexical', hits: this.hitsOf(lexical.slice(0, topK)) };
    const fused = new Map<number, number>();
    for (const ranking of [lexical, nearest]) {
      ranking.forEach(({ id }, rank) => fused.set(id, (fused.get(id) ?? 0) + 1 / (RRF_K + rank + 1)));
    }
    return { retrieval: 'hybrid', hits: this.hitsOf(bestOf(fused, topK)) };
  }

  private hitsOf(scored: Array<{ id: number; score: number }>): Hit[] {
    const hits: Hit[] = [];
    for (const { id, score } of scored) {
      const chunk = this.chunks.get(id);
      if (!chunk) continue;
      const document = this.documents.get(chunk.document);
      hits.push({ documentId: chunk.document, filename: document?.filename ?? null, chunk: chunk.index, score, text: chunk.text });
    }
    return hits;
  }

  /**
   * Every chunk of a knowledge base (its key: project and name), for building its vector graph. A chunk's text is
   * read from lmdb only if asked for (to embed it): loading a saved graph needs the ids alone, and reading a hundred
   * thousand texts at once would hold the event loop for seconds.
   */
  private liveChunks(kb: string): ChunkText[] {
    const [project, knowledgeBase] = kb.split('/') as [string, string];
    const chunks = this.chunks;
    const out: ChunkText[] = [];
    for (const document of this.list(project, knowledgeBase)) {
      for (const id of document.chunkIds) {
        out.push({
          id,
          get text() {
            return chunks.get(id)?.text ?? '';
          },
        });
      }
    }
    return out;
  }

  /** The knowledge base's BM25 index: built already, or once its build (started now if need be) is over. */
  private lexicalIndex(kb: string): Promise<Bm25Index> {
    const ready = this.indexes.get(kb);
    if (ready) return Promise.resolve(ready);
    let build = this.building.get(kb);
    if (!build) {
      build = this.buildLexical(kb).finally(() => {
        this.building.delete(kb);
        this.partialIndexes.delete(kb);
      });
      this.building.set(kb, build);
    }
    return build;
  }

  /**
   * Indexes the knowledge base's stored chunks a slice per turn of the event loop. Documents added meanwhile go
   * into the partial index directly (and are skipped here); removed ones are gone from lmdb before they are removed
   * from the index, so a chunk read here is never a removed one.
   */
  private async buildLexical(kb: string): Promise<Bm25Index> {
    const started = performance.now();
    const index = new Bm25Index();
    this.partialIndexes.set(kb, index);
    const [project, knowledgeBase] = kb.split('/') as [string, string];
    let read = 0;
    for (const document of this.list(project, knowledgeBase)) {
      for (const chunkId of document.chunkIds) {
        if (++read % LEXICAL_PER_TURN === 0) {
          await yieldTurn();
          if (this.closing) throw new LibraryError(503, 'The daemon is shutting down. Retry in a few seconds.');
        }
        if (index.has(chunkId)) continue;
        const chunk = this.chunks.get(chunkId);
        if (chunk) index.add(chunkId, chunk.text);
      }
    }
    this.indexes.set(kb, index);
    if (index.size >= LOGGED_BUILD) {
      this.limits.log.info({ knowledgeBase: kb, chunks: index.size, ms: Math.round(performance.now() - started) }, 'lexical index built');
    }
    return index;
  }
}
