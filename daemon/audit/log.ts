// The append-only audit log in lmdb: each entry as canonical JSON under its leaf index, and the hash of every
// complete subtree above the leaves (level ≥ 1, index), so tree heads and proofs take O(log n) lookups (a leaf's own
// hash is recomputed from its entry). The entry is durable, and acknowledged, once the write-ahead journal
// (journal.ts) has it on disk. Its lmdb writes (the entry and the subtrees it completes) are batched: the appends of
// up to LMDB_BATCH_MS share one lmdb commit, which syncs in the background, and a start after a crash replays from
// the journal what lmdb lost. Without a journal (tools that only read), an append waits for lmdb's own flush. The
// size is the number of entries both on disk and readable: they are written in order.
import { dirname, join, resolve } from 'node:path';
import type { Database } from 'lmdb';
import { probeDirectory, type Store } from '../store/index.js';
import { AcknowledgedEntries } from './acknowledged.js';
import { canonicalJson, type Canonical } from './canonical.js';
import { AuditJournal, JOURNAL_DIRS_FILE, readJournalDirs, writeJournalDirs, type JournalRecord } from './journal.js';
import { consistencyProof, inclusionProof, leafHash, nodeHash, treeHead, type Hash, type SubtreeHash } from './merkle.js';
import { RequestIndex, requestIdNeedle } from './request-index.js';

/** Subtree keys: level × 2^40 + index (a log of up to a trillion entries, keys exact in a double). */
const LEVEL_STRIDE = 2 ** 40;

export interface AuditLogOptions {
  /** Directory of the write-ahead journal (the data directory); absent: appends wait for lmdb's flush instead. */
  journalDir?: string;
  /**
   * Where journal files may have been left before the journal moved to `journalDir` (the data directory, its
   * default). The directories the journal has been kept in are also named in a file next to lmdb's
   * (JOURNAL_DIRS_FILE) and searched too.
   */
  formerJournalDirs?: string[];
}

/** How long an acknowledged entry may wait before its lmdb write is issued: one lmdb commit serves them all. */
const LMDB_BATCH_MS = 10;
/** A batch this large is issued at once. */
const LMDB_BATCH_ENTRIES = 512;

/**
 * The entry's UTF-8 in memory of its own. It MUST NOT be a slice of Node's shared buffer pool (Buffer.from): the entry
 * is held until lmdb has it, long enough to be promoted to the old generation now and then, and a promoted slice keeps
 * its whole slab alive until the next full collection. Under load that external memory drives V8 into full
 * collections that stop the event loop; memory of its own costs a little more per entry and avoids them.
 */
function ownBytes(json: string): Buffer {
  const bytes = Buffer.allocUnsafeSlow(Buffer.byteLength(json));
  bytes.write(json);
  return bytes;
}

/** An append's lmdb writes, waiting for the next batch. */
interface Unwritten {
  index: number;
  bytes: Buffer;
  /** The request id the entry names, for the index by request id (null: it names none). */
  requestId: string | null;
  /** Subtrees the entry completes: [key, hash]. */
  nodes: Array<[number, Hash]>;
}

/** What opening the journal at a start found and left to do (AuditLog.openJournal). */
interface ReopenedJournal {
  /** The journal files read, to remove once lmdb has their entries on disk. */
  files: string[];
  /** The lowest index put back into lmdb (Infinity if none). */
  replayedFrom: number;
  /** Once the files are gone, shrinks the list of journal directories to the journal's own (null: it is already). */
  settle: (() => void) | null;
}

interface SizeWaiter {
  size: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class AuditLog {
  private journal: AuditJournal | null = null;
  /** Leaves assigned so far (some may still be committing). */
  private assigned = 0;
  /** Leaves on disk and readable from lmdb: what proofs and checkpoints may cover. */
  private durable = 0;
  /** Leaves the journal has on disk (acknowledged): every leaf below it. */
  private journaled = 0;
  /** Leaves lmdb has committed: every leaf below it. */
  private committed = 0;
  /**
   * Right edge of the tree: the complete subtree at each level still waiting for its right sibling, by level (at most
   * 41 levels: keys hold a trillion entries, LEVEL_STRIDE). An array rewritten in place rather than a Map, for the
   * reason given in acknowledged.ts.
   */
  private readonly pending: Array<Hash | undefined> = new Array<Hash | undefined>(64).fill(undefined);
  /** Appends whose lmdb writes wait for the next batch (journal mode), in index order. */
  private unwritten: Unwritten[] = [];
  private batchTimer: NodeJS.Timeout | null = null;
  /** Set by close(): later appends are refused, so no write can follow the last batch. */
  private closing = false;
  /** Resolves when every lmdb batch issued so far has committed. */
  private lmdbTail: Promise<void> = Promise.resolve();
  /** Resolves when every lmdb batch issued so far has committed or failed (the tail stops at the first failure). */
  private lmdbWrites: Promise<unknown> = Promise.resolve();
  /** A recovery under way after a failed write. */
  private recovering: Promise<boolean> | null = null;
  /** settled() callers, each waiting for the log to reach a size. */
  private sizeWaiters: SizeWaiter[] = [];
  /** Set by the first failed write: the in-memory tree no longer matches the disk, so nothing more is appended. */
  private failure: Error | null = null;
  /** Entries acknowledged (in the journal) that lmdb does not hold readable yet. */
  private readonly acknowledged = new AcknowledgedEntries();

  private constructor(
    private readonly store: Store,
    private readonly options: AuditLogOptions,
    private readonly entries: Database<Buffer, number>,
    private readonly nodes: Database<Buffer, number>,
    /** Request id → newest leaf, for leaves below `committed`; the ones above are searched in memory. */
    private readonly requestIndex: RequestIndex,
  ) {}

  /**
   * Opens the log in `store` as the disk holds it (load). With `options.journalDir` (the daemon: the journal's one
   * writer) the journal's entries lmdb lacks are put back first, and an append is acknowledged once the journal has
   * it; without (tools), an append waits for lmdb's own flush. Throws if a journal directory cannot be used.
   */
  static open(store: Store, options: AuditLogOptions = {}): AuditLog {
    const log = new AuditLog(store, options, store.bytes('audit-entries'), store.bytes('audit-nodes'), new RequestIndex(store));
    log.assigned = log.durable = log.journaled = log.committed = log.load();
    return log;
  }

  /**
   * The log as the disk holds it, as at a start: the journal's entries lmdb lacks put back, a hole cut off, the tree's
   * right edge read, and a new journal file to append to. Returns the size.
   */
  private load(): number {
    const reopened = this.options.journalDir ? this.openJournal(resolve(this.options.journalDir)) : null;
    const size = this.repairTail();
    if (reopened && reopened.replayedFrom < size) this.rebuildNodes(reopened.replayedFrom, size);
    // What lmdb lost and the journal put back (or a log older than the index) is indexed before any append. Only by the
    // daemon (the journal's writer): a tool that reads the log while it runs MUST NOT write to it.
    if (reopened) this.requestIndex.catchUp(size, (leaf) => this.entries.get(leaf));
    this.acknowledged.dropBelow(size);
    this.readRightEdge(size);
    if (reopened) this.forgetReplayed(reopened);
    return size;
  }

  /**
   * Opens the journal in `dir` and puts into lmdb the entries its files hold that lmdb lacks. Returns the files
   * replayed, the lowest index put back (Infinity if none), and, when the journal has moved, what shrinks the list of
   * its directories to `dir` alone.
   */
  private openJournal(dir: string): ReopenedJournal {
    const { store, options } = this;
    const list = join(dirname(store.path), JOURNAL_DIRS_FILE);
    const known = readJournalDirs(list);
    // A new log's id is kept before any directory bears it.
    if (!known.dirs.length) writeJournalDirs(list, known);
    // Before a journal file goes, lmdb must have its entries on disk: the batch still waiting is issued first.
    // After a failed write nothing is issued any more, so the file must stay (it is replayed).
    const opened = AuditJournal.open(
      dir,
      () => {
        if (this.failure) return Promise.reject(this.failure);
        this.writeBatch();
        return this.lmdbTail.then(() => store.flushed());
      },
      known,
      (options.formerJournalDirs ?? []).map((d) => resolve(d)),
    );
    let replayedFrom: number;
    try {
      // Named before the journal there takes its first entry (once it could be opened): a crash from here on finds
      // its files at the next start, whatever audit.journalDir says then.
      if (!known.dirs.includes(dir)) writeJournalDirs(list, { log: known.log, dirs: [...known.dirs, dir] });
      replayedFrom = this.replay(opened.records);
    } catch (err) {
      void opened.journal.close();
      throw err;
    }
    this.journal = opened.journal;
    const moved = known.dirs.length !== 1 || known.dirs[0] !== dir;
    return {
      files: opened.files,
      replayedFrom,
      settle: moved ? () => writeJournalDirs(list, { log: known.log, dirs: [dir] }) : null,
    };
  }

  /** The tree's right edge for a log of `size` leaves: the complete subtree at each level still waiting for a sibling. */
  private readRightEdge(size: number): void {
    this.pending.fill(undefined);
    for (let level = 0; 2 ** level <= size; level++) {
      if (Math.floor(size / 2 ** level) % 2 === 1) {
        this.pending[level] = this.subtree(level, Math.floor(size / 2 ** level) - 1);
      }
    }
  }

  /**
   * The replayed files go once lmdb has their entries on disk; until then a crash replays them again. Only then are
   * the directories the journal has left forgotten. If a file cannot be removed, they stay remembered (and it is
   * replayed again, harmlessly, at every start).
   */
  private forgetReplayed({ files, settle }: ReopenedJournal): void {
    if (!files.length && !settle) return;
    void this.store
      .flushed()
      .then(() => {
        AuditJournal.discard(files);
        settle?.();
      })
      .catch(() => {});
  }

  /**
   * After a failed write, starts the log again from what is on disk, as a restart would (load): every acknowledged
   * entry is in the journal files, and none after a lost one was acknowledged. Resolves true once appends are taken
   * again, false while the journal's directory or lmdb still refuse a write (the log stays stopped).
   */
  recover(): Promise<boolean> {
    if (!this.failure) return Promise.resolve(true);
    return (this.recovering ??= this.recoverOnce().finally(() => (this.recovering = null)));
  }

  private async recoverOnce(): Promise<boolean> {
    try {
      if (this.options.journalDir) probeDirectory(resolve(this.options.journalDir));
    } catch {
      return false;
    }
    if (!this.store.writes.writable()) return false;
    // Nothing may still be writing what the disk is read from: the journal's last write, lmdb's batches.
    await this.journal?.close();
    await this.lmdbWrites;
    if (this.closing) return false;
    let size: number;
    try {
      size = this.load();
    } catch {
      return false;
    }
    if (this.batchTimer) clearTimeout(this.batchTimer);
    this.batchTimer = null;
    this.unwritten = [];
    this.lmdbTail = Promise.resolve();
    this.assigned = this.durable = this.journaled = this.committed = size;
    this.failure = null;
    return true;
  }

  /** Puts into lmdb the journal's entries it lacks; returns the lowest index put (Infinity if none). */
  private replay(records: JournalRecord[]): number {
    let from = Infinity;
    for (const record of records) {
      if (this.entries.doesExist(record.index)) continue;
      this.entries.putSync(record.index, record.payload);
      from = Math.min(from, record.index);
    }
    return from;
  }

  /** Recomputes the subtree hashes covering leaves from `from` up to `size` (after a replay). */
  private rebuildNodes(from: number, size: number): void {
    for (let level = 1; 2 ** level <= size; level++) {
      const last = Math.floor(size / 2 ** level);
      for (let i = Math.floor(from / 2 ** level); i < last; i++) {
        const hash = nodeHash(this.subtree(level - 1, 2 * i), this.subtree(level - 1, 2 * i + 1));
        this.nodes.putSync(level * LEVEL_STRIDE + i, hash);
      }
    }
  }

  /** Leaves committed to disk. */
  get size(): number {
    return this.durable;
  }

  /** Leaves readable through entry(): the acknowledged ones too, which lmdb may not hold yet. */
  get readable(): number {
    return Math.max(this.durable, this.journaled);
  }

  /**
   * Appends an entry; resolves with its leaf index once the entry is on disk. The index is taken synchronously, so
   * entries appear in the order append was called.
   *
   * With a journal, the entry is durable once the journal has synced it; its lmdb writes (the entry and the subtrees
   * it completes) wait up to LMDB_BATCH_MS so that one lmdb commit serves many calls. Without one (tools), an append
   * waits for lmdb's own flush.
   */
  append(entry: Canonical): Promise<number> {
    return this.appendCanonical(canonicalJson(entry));
  }

  /**
   * append() for an entry its caller has already written as canonical JSON (the daemon's call entries). `requestId`
   * is the request id the entry names, if any: it is indexed with the entry's lmdb batch (findRequest).
   */
  appendCanonical(json: string, requestId: string | null = null): Promise<number> {
    if (this.failure) {
      return Promise.reject(
        new Error(`the audit log stopped after a failed write (${this.failure.message}); it starts again once the disk takes writes`),
      );
    }
    if (this.closing) return Promise.reject(new Error('the audit log is closed'));
    const bytes = ownBytes(json);
    const index = this.assigned++;
    let hash = leafHash(bytes);
    const nodes: Array<[number, Hash]> = [];
    let level = 0;
    for (let i = index; i % 2 === 1; i = (i - 1) / 2) {
      hash = nodeHash(this.pending[level]!, hash);
      this.pending[level] = undefined;
      level++;
      nodes.push([level * LEVEL_STRIDE + (i - 1) / 2, hash]);
    }
    this.pending[level] = hash;
    this.unwritten.push({ index, bytes, requestId, nodes });
    if (!this.journal) {
      this.writeBatch();
      return this.lmdbTail
        .then(() => this.store.flushed())
        .then(() => this.advance(index + 1, 'journaled'))
        .then(() => index);
    }
    if (this.unwritten.length >= LMDB_BATCH_ENTRIES) this.writeBatch();
    else if (!this.batchTimer) {
      this.batchTimer = setTimeout(() => this.writeBatch(), LMDB_BATCH_MS);
      // close() writes what is waiting; the timer alone does not keep a process alive.
      this.batchTimer.unref();
    }
    // The journal writes in order and refuses everything after a failed write, so an acknowledged entry never
    // follows a lost one.
    return this.journal.append(index, bytes).then(
      () => {
        if (index >= this.durable) this.acknowledged.add(index, bytes);
        this.advance(index + 1, 'journaled');
        return index;
      },
      (err: Error) => {
        this.stop(err);
        throw err;
      },
    );
  }

  /** Issues the waiting lmdb writes as one batch (lmdb commits the puts of one event turn together). */
  private writeBatch(): void {
    if (this.batchTimer) {
      clearTimeout(this.batchTimer);
      this.batchTimer = null;
    }
    const batch = this.unwritten;
    if (!batch.length || this.failure) return;
    this.unwritten = [];
    let committed: Promise<unknown>;
    try {
      const writes: Array<Promise<boolean>> = [];
      const ids: Array<[string, number]> = [];
      for (const { index, bytes, requestId, nodes } of batch) {
        writes.push(this.entries.put(index, bytes));
        for (const [key, hash] of nodes) writes.push(this.nodes.put(key, hash));
        if (requestId !== null) ids.push([requestId, index]);
      }
      // In the same lmdb commit as the entries (puts of one turn commit together): the index never runs ahead of them.
      writes.push(...this.requestIndex.put(ids, batch[batch.length - 1]!.index + 1));
      committed = Promise.all(writes);
    } catch (err) {
      // This runs from a timer and from the journal's rotation: a throw must stop the log, not escape.
      committed = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    // Handled here at once: a batch after a failed one never gets its own turn in the tail below.
    const outcome = committed.catch((err: Error) => this.stop(err));
    this.lmdbWrites = Promise.all([this.lmdbWrites, outcome]);
    const end = batch[batch.length - 1]!.index + 1;
    // Batches commit in the order they were issued; the tail keeps `committed` moving in that order too.
    this.lmdbTail = this.lmdbTail.then(() =>
      committed.then(
        () => this.advance(end, 'committed'),
        (err: Error) => {
          this.stop(err);
          throw err;
        },
      ),
    );
    this.lmdbTail.catch(() => {});
  }

  private advance(size: number, what: 'journaled' | 'committed'): void {
    if (what === 'journaled') this.journaled = Math.max(this.journaled, size);
    else this.committed = Math.max(this.committed, size);
    // Without a journal, lmdb's flush is what makes an entry durable: `journaled` then means flushed.
    const durable = Math.min(this.journaled, this.committed);
    if (durable <= this.durable) return;
    this.durable = durable;
    this.acknowledged.dropBelow(durable);
    if (this.sizeWaiters.length) {
      const waiting = this.sizeWaiters;
      this.sizeWaiters = [];
      for (const w of waiting) {
        if (w.size <= durable) w.resolve();
        else this.sizeWaiters.push(w);
      }
    }
  }

  private stop(err: Error): void {
    if (!this.failure) this.store.writes.note(err, 'the audit log');
    this.failure ??= err;
    for (const w of this.sizeWaiters.splice(0)) w.reject(this.failure);
  }

  /** Resolves once every append so far is readable for proofs (or rejects after a failed write). */
  settled(): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const size = this.assigned;
    if (size <= this.durable) return Promise.resolve();
    this.writeBatch();
    return new Promise((resolve, reject) => this.sizeWaiters.push({ size, resolve, reject }));
  }

  /** Refuses further appends, writes the last batch, then closes the journal after its last write. */
  async close(): Promise<void> {
    this.closing = true;
    this.writeBatch();
    await this.lmdbTail.catch(() => {});
    await this.journal?.close();
  }

  /** Why appends stopped, if they did (for health). */
  get problem(): string | null {
    return this.failure ? `the audit log stopped after a failed write: ${this.failure.message}` : null;
  }

  /** The failed write that stopped appends, if one did. */
  get stoppedBy(): Error | null {
    return this.failure;
  }

  /**
   * The log's size, after dropping whatever follows a hole: a batch that failed to commit while later ones did
   * leaves entries after a missing one. None of those was acknowledged (see append), so they are removed, with the
   * subtrees that cover them.
   */
  private repairTail(): number {
    let last = -1;
    for (const key of this.entries.getKeys({ reverse: true, limit: 1 })) last = key;
    if (last < 0 || (this.entries.getStats() as { entryCount: number }).entryCount === last + 1) return last + 1;
    let size = 0;
    for (const key of this.entries.getKeys()) {
      if (key !== size) break;
      size++;
    }
    for (const key of this.entries.getKeys({ start: size })) this.entries.removeSync(key);
    for (let level = 1; 2 ** level <= last + 1; level++) {
      // A subtree at this level covering any leaf at or past `size` is dropped.
      const first = Math.floor(size / 2 ** level);
      for (const key of this.nodes.getKeys({ start: level * LEVEL_STRIDE + first, end: (level + 1) * LEVEL_STRIDE }))
        this.nodes.removeSync(key);
    }
    return size;
  }

  /**
   * The newest leaf whose entry names `requestId`, among those readable (acknowledged ones lmdb does not hold yet
   * included: a client asks right after its answer); null if none. The leaves lmdb has committed are found in the
   * index, the few after them (the batches still committing) by reading them.
   */
  findRequest(requestId: string): number | null {
    const needle = requestIdNeedle(requestId);
    const readable = this.readable;
    for (let i = readable - 1; i >= this.committed; i--) {
      if (this.entry(i)?.includes(needle)) return i;
    }
    const leaf = this.requestIndex.get(requestId);
    // An index key for a leaf cut off after a hole (repairTail) may name another entry now.
    if (leaf === undefined || leaf >= Math.min(readable, this.committed) || !this.entry(leaf)?.includes(needle)) return null;
    return leaf;
  }

  /** The entry's canonical JSON bytes, or undefined. */
  entry(index: number): Buffer | undefined {
    return index < this.durable ? this.entries.get(index) : this.acknowledged.get(index);
  }

  readonly subtree: SubtreeHash = (level, index) => {
    if (level === 0) {
      const entry = this.entries.get(index);
      if (!entry) throw new Error(`audit log is missing entry ${index}`);
      return leafHash(entry);
    }
    const hash = this.nodes.get(level * LEVEL_STRIDE + index);
    if (!hash) throw new Error(`audit log is missing subtree ${level}/${index}`);
    return Buffer.from(hash);
  };

  root(size = this.durable): Hash {
    this.check(size);
    return treeHead(this.subtree, size);
  }

  inclusion(index: number, size = this.durable): Hash[] {
    this.check(size);
    return inclusionProof(this.subtree, index, size);
  }

  consistency(from: number, to = this.durable): Hash[] {
    this.check(to);
    return consistencyProof(this.subtree, from, to);
  }

  private check(size: number): void {
    if (size > this.durable) throw new RangeError(`the log has ${this.durable} entries, not ${size}`);
  }
}
