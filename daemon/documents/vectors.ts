// Vector retrieval: one HNSW graph (hnswlib-node, cosine) per knowledge base over the chunks' embeddings.
//
// The store is the truth. Each chunk's vector is stored there (float32 bytes under the chunk id), next to the chunk,
// with the model and dimensions of each knowledge base's vectors (shared by every replica with store: postgres); the
// graph file under <dataDir>/vectors/ is only this machine's cache of those vectors, written whole to a temporary
// file, renamed into place, and its SHA-256 recorded in this machine's lmdb. hnswlib reads a graph file without checking it (a truncated or
// altered one can make it allocate absurdly or crash the process), so a file is read only when its digest matches
// the recorded one; otherwise the graph is rebuilt from the stored vectors at boot. A graph that loads is reconciled
// with the chunks: labels of deleted chunks are marked deleted, chunks missing from it are added (from their stored
// vector, or embedded again when a crash came between storing a chunk and its vector).
//
// hnswlib's graph is not safe to change while it is being written to disk (the write runs on a libuv thread), so
// every change to a graph and every write of it goes through that graph's queue; searches only read.
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import hnswlib from 'hnswlib-node';
import type { Database } from 'lmdb';
import type { Store, Tx } from '../store/index.js';

/** Turns text into vectors with the embeddings model the documents use. */
export interface Embedder {
  readonly model: string;
  embed(texts: string[], signal?: AbortSignal): Promise<Float32Array[]>;
}

export interface ChunkText {
  id: number;
  text: string;
}

export interface VectorHit {
  id: number;
  /** Cosine similarity, -1..1. */
  score: number;
}

/** A knowledge base's vectors, as every replica shares them. */
interface GraphRecord {
  model: string;
  dimensions: number;
  /** SHA-256 of the graph file, where records written before graph files had their own record held it. */
  sha256?: string | null;
  /** Some chunks have no vector from this model yet. */
  incomplete?: boolean;
}

export interface VectorLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** The live chunks of a knowledge base, as the library knows them. */
export type LiveChunks = (kb: string) => ChunkText[];

const M = 16;
const EF_CONSTRUCTION = 100;
const EF_SEARCH = 64;
const EMBED_BATCH = 16;
const PERSIST_DELAY_MS = 2000;
/** Graph inserts per turn of the event loop while rebuilding, so a large rebuild does not stall other calls. */
const INSERTS_PER_TURN = 256;
/** Jobs at least this long report their progress. */
const PROGRESS_MIN_CHUNKS = 200;

class Graph {
  readonly index: hnswlib.HierarchicalNSW;
  readonly labels = new Set<number>();
  queue: Promise<unknown> = Promise.resolve();
  incomplete = false;
  persistTimer: NodeJS.Timeout | null = null;

  constructor(
    readonly model: string,
    readonly dimensions: number,
    capacity: number,
  ) {
    this.index = new hnswlib.HierarchicalNSW('cosine', dimensions);
    this.index.initIndex({ maxElements: Math.max(1024, capacity), m: M, efConstruction: EF_CONSTRUCTION, allowReplaceDeleted: true });
    this.index.setEf(EF_SEARCH);
  }

  add(id: number, vector: Float32Array): void {
    if (this.labels.has(id)) return;
    if (this.index.getCurrentCount() >= this.index.getMaxElements()) this.index.resizeIndex(this.index.getMaxElements() * 2);
    this.index.addPoint(Array.from(vector), id, true);
    this.labels.add(id);
  }

  remove(id: number): void {
    if (!this.labels.delete(id)) return;
    this.index.markDelete(id);
  }
}

/** Calls `fn` in the graph's queue: after every change and write queued before it. */
function queued<T>(graph: Graph, fn: () => Promise<T> | T): Promise<T> {
  const run = graph.queue.then(fn, fn);
  graph.queue = run.catch(() => {});
  return run;
}

async function fileSha256(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

const yieldTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

export class VectorIndexes {
  private readonly vectors: Database<Buffer, number>;
  private readonly records: Database<GraphRecord, string>;
  /** SHA-256 (hex) of each knowledge base's graph file last written here: this machine's, never shared. */
  private readonly files: Database<string, string>;
  private readonly graphs = new Map<string, Graph>();
  /** Knowledge bases being loaded or caught up, so that concurrent callers wait for the same work. */
  private readonly preparing = new Map<string, Promise<Graph | null>>();

  constructor(
    private readonly store: Store,
    private readonly dir: string,
    private readonly liveChunks: LiveChunks,
    private readonly log: VectorLog,
  ) {
    this.vectors = store.bytes('document-vectors');
    this.records = store.db<GraphRecord>('document-graphs');
    this.files = store.db<string>('document-graph-files');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** Loads (or rebuilds) every knowledge base's graph: at boot, so that a damaged file is repaired before use. */
  async openAll(): Promise<void> {
    for (const { key } of this.records.getRange()) await this.load(key);
  }

  /** The model whose vectors the knowledge base holds, if any. */
  modelOf(kb: string): string | undefined {
    return this.records.get(kb)?.model;
  }

  /**
   * The knowledge base's graph, ready for this embedder's vectors: loaded, and caught up when it holds another
   * model's vectors or misses some chunks' (ingested while no embeddings model was served).
   */
  async prepare(kb: string, embedder: Embedder, signal?: AbortSignal): Promise<void> {
    await this.ready(kb, embedder, signal);
  }

  /** Embeds a new document's chunks, in batches, logging progress on long documents. */
  embed(chunks: ChunkText[], embedder: Embedder, document: string, signal?: AbortSignal): Promise<Float32Array[]> {
    return this.embedAll(chunks, embedder, { document }, signal);
  }

  /** Stores a new document's vectors, in the change `tx` that stores its chunks. */
  putIn(tx: Tx, chunkIds: number[], vectors: Float32Array[]): void {
    chunkIds.forEach((id, i) =>
      tx.put('document-vectors', id, Buffer.from(vectors[i]!.buffer, vectors[i]!.byteOffset, vectors[i]!.byteLength)),
    );
  }

  /** Adds chunks another replica stored, with their stored vectors, to the knowledge base's graph if it is loaded. */
  async insertStored(kb: string, chunkIds: number[]): Promise<void> {
    const graph = this.graphs.get(kb);
    const record = this.records.get(kb);
    if (!graph || !record) return;
    if (graph.model !== record.model) {
      // The vectors are of another model now: the next use rebuilds the graph.
      this.graphs.delete(kb);
      return;
    }
    await queued(graph, () => {
      for (const id of chunkIds) {
        const vector = this.storedVector(id, graph.dimensions);
        if (vector) graph.add(id, vector);
        else graph.incomplete = true;
      }
    });
    this.persistSoon(kb, graph);
  }

  /** Adds a committed document's vectors to the knowledge base's graph. */
  async insert(kb: string, chunkIds: number[], vectors: Float32Array[]): Promise<void> {
    const graph = this.graphs.get(kb);
    if (!graph) return;
    await queued(graph, () => chunkIds.forEach((id, i) => graph.add(id, vectors[i]!)));
    this.persistSoon(kb, graph);
  }

  /** Records that a knowledge base with vectors got chunks without any (no embeddings model was served then). */
  async markIncomplete(kb: string): Promise<void> {
    const graph = this.graphs.get(kb);
    if (graph) graph.incomplete = true;
    const record = this.records.get(kb);
    // The document is stored already: a mark that cannot be written (a full disk) must not fail its call. The graph
    // in memory is marked, and caught up at its next use; only a restart before then forgets the mark.
    if (record && !record.incomplete) {
      await this.store
        .update((tx) => {
          const current = tx.get<GraphRecord>('document-graphs', kb);
          if (current && !current.incomplete) tx.put('document-graphs', kb, { ...current, incomplete: true });
        })
        .catch((err: Error) => this.log.warn({ knowledgeBase: kb, err: err.message }, 'could not mark the vector index incomplete'));
    }
  }

  /** Deletes the vectors of removed chunks, in the change `tx` that removes the chunks. */
  dropIn(tx: Tx, chunkIds: number[]): void {
    for (const id of chunkIds) tx.remove('document-vectors', id);
  }

  /** Takes removed chunks out of the knowledge base's graph (after their transaction committed). */
  async forget(kb: string, chunkIds: number[]): Promise<void> {
    const graph = this.graphs.get(kb);
    if (!graph) return;
    await queued(graph, () => chunkIds.forEach((id) => graph.remove(id)));
    this.persistSoon(kb, graph);
  }

  /** The chunks nearest the query, best first; null when the knowledge base has no vectors from this model. */
  async search(kb: string, embedder: Embedder, query: string, k: number, signal?: AbortSignal): Promise<VectorHit[] | null> {
    const graph = await this.ready(kb, embedder, signal);
    if (!graph || !graph.labels.size) return null;
    const [vector] = await embedder.embed([query], signal);
    const found = graph.index.searchKnn(Array.from(vector!), Math.min(k, graph.labels.size));
    return found.neighbors.map((id, i) => ({ id, score: 1 - found.distances[i]! }));
  }

  /** Writes every graph with unsaved changes; call at shutdown. */
  async close(): Promise<void> {
    for (const [kb, graph] of this.graphs) {
      if (graph.persistTimer) {
        clearTimeout(graph.persistTimer);
        graph.persistTimer = null;
        await queued(graph, () => this.persist(kb, graph)).catch((err: Error) =>
          this.log.warn({ knowledgeBase: kb, err: err.message }, 'could not save the vector index; it will be rebuilt at the next start'),
        );
      }
      // Also any write already under way: the store closes after this.
      await graph.queue;
    }
  }

  /** The graph of a knowledge base, loaded and caught up with its chunks and the embedder's model. */
  private async ready(kb: string, embedder: Embedder, signal?: AbortSignal): Promise<Graph> {
    const graph = await this.load(kb);
    if (graph && graph.model === embedder.model && !graph.incomplete) return graph;
    // A new knowledge base, another model, or chunks without vectors: one catch-up at a time per knowledge base.
    let work = this.preparing.get(kb);
    if (!work) {
      work = this.catchUp(kb, graph, embedder, signal).finally(() => this.preparing.delete(kb));
      this.preparing.set(kb, work);
    }
    const caughtUp = await work;
    if (!caughtUp) throw new Error(`the vector index of ${kb} could not be prepared`);
    return caughtUp;
  }

  private async catchUp(kb: string, existing: Graph | null, embedder: Embedder, signal?: AbortSignal): Promise<Graph> {
    const live = this.liveChunks(kb);
    const reuse = existing?.model === embedder.model;
    // Same model: only the chunks without a vector. First vectors or another model: every chunk, with this model.
    const pending = reuse ? live.filter((c) => !existing.labels.has(c.id)) : live;
    const reason = reuse ? 'chunks without vectors' : existing ? 'the embeddings model changed' : 'first vectors';
    const vectors = await this.embedAll(pending, embedder, { knowledgeBase: kb, reason }, signal);
    const dimensions = vectors[0]?.length ?? existing?.dimensions ?? (await embedder.embed(['dimensions'], signal))[0]!.length;
    const graph = reuse ? existing : new Graph(embedder.model, dimensions, live.length * 2);
    if (existing) await existing.queue;
    await this.store.update((tx) => {
      this.putIn(
        tx,
        pending.map((c) => c.id),
        vectors,
      );
      tx.put('document-graphs', kb, { model: embedder.model, dimensions });
    });
    // A graph of another model's vectors: its file is no cache of these.
    if (!reuse) this.files.remove(kb).catch(() => {});
    await queued(graph, async () => {
      for (let i = 0; i < pending.length; i++) {
        graph.add(pending[i]!.id, vectors[i]!);
        if (i % INSERTS_PER_TURN === INSERTS_PER_TURN - 1) await yieldTurn();
      }
      graph.incomplete = false;
    });
    this.graphs.set(kb, graph);
    this.persistSoon(kb, graph);
    return graph;
  }

  /** The graph as it was last saved, verified, reconciled with the chunks; rebuilt from stored vectors if damaged. */
  private async load(kb: string): Promise<Graph | null> {
    const loaded = this.graphs.get(kb);
    if (loaded) return loaded;
    let work = this.preparing.get(kb);
    if (!work) {
      work = this.loadFromDisk(kb).finally(() => this.preparing.delete(kb));
      this.preparing.set(kb, work);
    }
    return work;
  }

  private async loadFromDisk(kb: string): Promise<Graph | null> {
    const record = this.records.get(kb);
    if (!record) return null;
    const live = this.liveChunks(kb);
    const path = this.fileOf(kb);
    const graph = new Graph(record.model, record.dimensions, live.length * 2);
    const sha256 = this.files.get(kb) ?? record.sha256;
    let problem: string | null = null;
    if (!sha256 || !existsSync(path)) problem = 'no saved index';
    else if ((await fileSha256(path)) !== sha256) problem = 'the index file does not match its recorded digest';
    if (!problem) {
      try {
        await graph.index.readIndex(path, true);
        graph.index.setEf(EF_SEARCH);
        for (const id of graph.index.getIdsList()) graph.labels.add(id);
      } catch (err) {
        problem = `the index file cannot be read (${(err as Error).message})`;
      }
    }
    if (problem) {
      if (sha256) this.log.warn({ knowledgeBase: kb, problem }, 'vector index damaged; rebuilding it from the stored vectors');
      return this.rebuild(kb, record, live);
    }
    const liveIds = new Set(live.map((c) => c.id));
    let removed = 0;
    for (const id of [...graph.labels]) {
      if (liveIds.has(id)) continue;
      try {
        graph.index.markDelete(id);
      } catch {
        // Already marked deleted in the saved file.
      }
      graph.labels.delete(id);
      removed++;
    }
    let added = 0;
    for (const chunk of live) {
      if (graph.labels.has(chunk.id)) continue;
      const vector = this.storedVector(chunk.id, record.dimensions);
      if (vector) {
        graph.add(chunk.id, vector);
        added++;
      } else graph.incomplete = true;
    }
    if (record.incomplete) graph.incomplete = true;
    this.graphs.set(kb, graph);
    if (removed || added) {
      this.log.info({ knowledgeBase: kb, removed, added }, 'vector index repaired: reconciled with the stored chunks');
      this.persistSoon(kb, graph);
    }
    return graph;
  }

  private async rebuild(kb: string, record: GraphRecord, live: ChunkText[]): Promise<Graph> {
    const graph = new Graph(record.model, record.dimensions, live.length * 2);
    let missing = 0;
    for (let i = 0; i < live.length; i++) {
      const vector = this.storedVector(live[i]!.id, record.dimensions);
      if (vector) graph.add(live[i]!.id, vector);
      else missing++;
      if (i % INSERTS_PER_TURN === INSERTS_PER_TURN - 1) await yieldTurn();
    }
    graph.incomplete = missing > 0 || Boolean(record.incomplete);
    this.graphs.set(kb, graph);
    this.log.info({ knowledgeBase: kb, vectors: graph.labels.size, missing }, 'vector index rebuilt from the stored vectors');
    await queued(graph, () => this.persist(kb, graph));
    return graph;
  }

  private storedVector(id: number, dimensions: number): Float32Array | null {
    const bytes = this.vectors.getBinary(id);
    if (!bytes || bytes.length !== dimensions * 4) return null;
    // Copied out: lmdb may reuse the buffer it returned.
    return new Float32Array(new Uint8Array(bytes).buffer);
  }

  /** Embeds in batches, logging progress at every tenth of a long job. */
  private async embedAll(chunks: ChunkText[], embedder: Embedder, about: object, signal?: AbortSignal): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    const step = chunks.length >= PROGRESS_MIN_CHUNKS ? Math.ceil(chunks.length / 10) : Infinity;
    let reported = 0;
    for (let at = 0; at < chunks.length; at += EMBED_BATCH) {
      signal?.throwIfAborted();
      out.push(
        ...(await embedder.embed(
          chunks.slice(at, at + EMBED_BATCH).map((c) => c.text),
          signal,
        )),
      );
      if (out.length - reported >= step && out.length < chunks.length) {
        reported = out.length;
        this.log.info({ ...about, model: embedder.model, embedded: out.length, of: chunks.length }, 'embedding chunks');
      }
    }
    return out;
  }

  private persistSoon(kb: string, graph: Graph): void {
    if (graph.persistTimer) return;
    graph.persistTimer = setTimeout(() => {
      graph.persistTimer = null;
      queued(graph, () => this.persist(kb, graph)).catch((err: Error) =>
        this.log.warn({ knowledgeBase: kb, err: err.message }, 'could not save the vector index; it will be rebuilt at the next start'),
      );
    }, PERSIST_DELAY_MS);
    graph.persistTimer.unref();
  }

  private async persist(kb: string, graph: Graph): Promise<void> {
    const path = this.fileOf(kb);
    const temporary = `${path}.tmp`;
    rmSync(temporary, { force: true });
    let sha256: string;
    try {
      await graph.index.writeIndex(temporary);
      sha256 = await fileSha256(temporary);
    } catch (err) {
      // A partial file (a full disk) would only take more of the space that is missing.
      rmSync(temporary, { force: true });
      throw err;
    }
    renameSync(temporary, path);
    await this.files.put(kb, sha256);
    const record = this.records.get(kb);
    if (record && Boolean(record.incomplete) !== graph.incomplete) {
      await this.store.update((tx) => {
        const current = tx.get<GraphRecord>('document-graphs', kb);
        if (current) tx.put('document-graphs', kb, { ...current, incomplete: graph.incomplete });
      });
    }
  }

  private fileOf(kb: string): string {
    return join(this.dir, `${createHash('sha256').update(kb).digest('hex').slice(0, 32)}.hnsw`);
  }
}
