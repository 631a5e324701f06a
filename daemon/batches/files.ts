// Files of the Batch API (/v1/files): a batch's input, as uploaded and scrubbed, and the output and error files its
// batch writes. Each is kept in lmdb as its record and its lines, one entry per line, so a batch reads the line it
// runs and writes the line it answered without rewriting a whole file. A file belongs to its project (another
// project's is as if absent), counts against the project's room (files.maxBytesPerProject), and is deleted once it
// expires (files.ttlSeconds) — except the input of a batch that has not ended, kept (though no longer served) until it
// has. Only scrubbed text is ever written here: the caller scrubs each line before it is stored.
//
// Files are shared state (store: postgres): written through `Store.update`, so a file uploaded through one replica is
// listed and read through every other.
import { randomBytes } from 'node:crypto';
import type { Database } from 'lmdb';
import { findFresh, replicaOf, type Store, type Tx } from '../store/index.js';

export type FilePurpose = 'batch' | 'batch_output';

/** A file as OpenAI's API answers it. */
export interface FileObject {
  id: string;
  object: 'file';
  bytes: number;
  created_at: number;
  expires_at: number;
  filename: string;
  purpose: FilePurpose;
  status: 'processed';
}

interface FileRecord {
  id: string;
  project: string;
  filename: string;
  purpose: FilePurpose;
  bytes: number;
  lines: number;
  /** ms since the epoch. */
  createdAt: number;
  expiresAt: number;
}

/** An upload past the project's room: how much it holds, and its room. */
export class QuotaExceeded extends Error {
  constructor(
    readonly used: number,
    readonly limit: number,
    readonly wanted: number,
  ) {
    super(`the project's files hold ${used} of ${limit} bytes; ${wanted} more do not fit`);
    this.name = 'QuotaExceeded';
  }
}

export interface FileStoreOptions {
  ttlMs: number;
  maxBytesPerProject: number;
  now?: () => number;
}

/**
 * Lines written or removed per change, and the bytes of lines written in one: a large file never holds the event loop
 * (or PostgreSQL) in one long transaction.
 */
const LINES_PER_TRANSACTION = 1000;
const BYTES_PER_TRANSACTION = 4 << 20;
/**
 * A loose mark another replica left (an upload it writes, a file it deletes) is its own until this long has passed:
 * longer than any upload takes. A replica's own marks that its process does not hold were left by its last run.
 */
const LOOSE_GRACE_MS = 3600_000;
/** The end of a file's range of lines (indexes are below it). */
const LAST = Number.MAX_SAFE_INTEGER;
const SWEEP_MS = 60_000;

export function newFileId(): string {
  return `file-${randomBytes(12).toString('hex')}`;
}

/** The size of a file of these lines, as its content is answered: each line and its line feed. */
export function bytesOf(lines: readonly string[]): number {
  let bytes = 0;
  for (const line of lines) bytes += Buffer.byteLength(line) + 1;
  return bytes;
}

export class FileStore {
  private readonly records: Database<FileRecord, string>;
  private readonly byProject: Database<true, [string, number, string]>;
  private readonly lines: Database<string, [string, number]>;
  /**
   * Files whose lines may be on disk without their record: an upload being written, a file being deleted. Each is
   * marked here in the same transaction that makes its record absent, and the mark goes with its last line, so a crash
   * in between leaves lines the next start removes.
   */
  private readonly loose: Database<LooseMark, string>;
  /** Bytes of uploads being written, per project: counted against its room until their records exist. */
  private readonly reserved = new Map<string, number>();
  /** Uploads being written now: loose, but not left by a crash. */
  private readonly writing = new Set<string>();
  /** This replica, as its loose marks name it. */
  private readonly replica: string;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | null = null;
  /** Whether a file must be kept though it expired: an unfinished batch reads it (set by the batch store). */
  private keep: (id: string) => boolean = () => false;

  constructor(
    private readonly store: Store,
    private readonly options: FileStoreOptions,
  ) {
    this.records = store.db<FileRecord>('files');
    this.byProject = store.db<true, [string, number, string]>('files-by-project');
    this.lines = store.db<string, [string, number]>('file-lines');
    this.loose = store.db<LooseMark>('files-loose');
    this.now = options.now ?? Date.now;
    this.replica = replicaOf(store);
  }

  /** Files `keep` names are not deleted when they expire (the inputs of batches that have not ended). */
  keepWhile(keep: (id: string) => boolean): void {
    this.keep = keep;
  }

  /** Removes what a crash left (lines without their record) and expired files, then every minute. */
  start(onError: (err: Error) => void): void {
    const sweep = () => void this.sweep().catch(onError);
    sweep();
    this.timer = setInterval(sweep, SWEEP_MS);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * Keeps `lines` as a file of the project for `ttlMs`; resolves with its object once it is durably on disk. QuotaExceeded when
   * the project has no room for it (its stored files, and uploads still being written, counted).
   */
  async create(
    project: string,
    file: { filename: string; purpose: FilePurpose; lines: readonly string[] },
    ttlMs = this.options.ttlMs,
  ): Promise<FileObject> {
    const bytes = bytesOf(file.lines);
    const release = this.reserve(project, bytes);
    const id = newFileId();
    this.writing.add(id);
    try {
      const mark: LooseMark = { replica: this.replica, at: this.now() };
      await this.store.update((tx) => tx.put('files-loose', id, mark));
      // Some lines a change; the record comes last, so a file is never seen half written.
      for (let from = 0; from < file.lines.length;) {
        let to = from;
        for (let bytes = 0; to < file.lines.length && to - from < LINES_PER_TRANSACTION && bytes < BYTES_PER_TRANSACTION; to++) {
          bytes += Buffer.byteLength(file.lines[to]!);
        }
        const start = from;
        await this.store.update((tx) => {
          for (let i = start; i < to; i++) tx.put('file-lines', [id, i], file.lines[i]!);
        });
        from = to;
      }
      const createdAt = this.now();
      const record: FileRecord = {
        id,
        project,
        filename: file.filename,
        purpose: file.purpose,
        bytes,
        lines: file.lines.length,
        createdAt,
        expiresAt: createdAt + ttlMs,
      };
      await this.store.update((tx) => this.putRecord(tx, record));
      await this.store.flushed();
      return objectOf(record);
    } catch (err) {
      // A write that failed (a full disk): what was written goes, or the next start removes it (it is still loose).
      void this.removeLines(id).catch(() => {});
      throw err;
    } finally {
      this.writing.delete(id);
      release();
    }
  }

  /**
   * In the change `tx`: the record of a file whose lines are already written under `id` (a batch's output, written
   * line by line as its batch ran). Answers its object.
   */
  putWritten(tx: Tx, project: string, id: string, file: { filename: string; bytes: number; lines: number }): FileObject {
    const createdAt = this.now();
    const record: FileRecord = {
      id,
      project,
      filename: file.filename,
      purpose: 'batch_output',
      bytes: file.bytes,
      lines: file.lines,
      createdAt,
      expiresAt: createdAt + this.options.ttlMs,
    };
    this.putRecord(tx, record);
    return objectOf(record);
  }

  /**
   * `find` on this replica's copy, and on a miss once more after catching up (store: postgres), so a file uploaded or
   * written through another replica a moment ago is found here.
   */
  fresh<T>(find: (files: this) => T): Promise<T> {
    return findFresh(this.store, () => find(this));
  }

  /** The project's file, unless it expired or was deleted. */
  get(project: string, id: string): FileObject | null {
    const record = this.live(project, id);
    return record ? objectOf(record) : null;
  }

  /** The project's files, oldest first, optionally of one purpose. */
  list(project: string, purpose?: string): FileObject[] {
    const out: FileObject[] = [];
    for (const { key } of this.byProject.getRange({ start: [project], end: [project, '\uffff'] })) {
      const record = this.live(project, key[2]);
      if (record && (purpose === undefined || record.purpose === purpose)) out.push(objectOf(record));
    }
    return out;
  }

  /** How many lines the project's file has (null when it has no such file). */
  lineCount(project: string, id: string): number | null {
    return this.live(project, id)?.lines ?? null;
  }

  /** Line `index` of a file, whether or not it has expired (a running batch reads its input to the end). */
  line(id: string, index: number): string | undefined {
    return this.lines.get([id, index]);
  }

  /** The file's content, every line followed by a line feed; null when the project has no such file. */
  async content(project: string, id: string): Promise<Buffer | null> {
    if (!this.live(project, id)) return null;
    const parts: Buffer[] = [];
    // Read some lines at a time, each part on its own and in turns with the calls the event loop serves: a long file
    // holds neither the loop nor a read transaction for long.
    for (let from = 0; ;) {
      let last = -1;
      for (const { key, value } of this.lines.getRange({ start: [id, from], end: [id, LAST], limit: LINES_PER_TRANSACTION })) {
        parts.push(Buffer.from(`${value}\n`));
        last = key[1];
      }
      if (last === -1) break;
      from = last + 1;
      await new Promise((resolve) => setImmediate(resolve));
    }
    return Buffer.concat(parts);
  }

  /** Deletes the project's file; false when it has none by that id. Its record goes at once, its lines after. */
  async delete(project: string, id: string): Promise<boolean> {
    const record = this.live(project, id);
    if (!record) return false;
    const deleted = await this.forget(record);
    await this.store.flushed();
    return deleted;
  }

  /** Bytes the project's files hold now (expired ones no longer count). */
  usedBytes(project: string): number {
    let used = 0;
    for (const { key } of this.byProject.getRange({ start: [project], end: [project, '\uffff'] })) {
      used += this.live(project, key[2])?.bytes ?? 0;
    }
    return used;
  }

  /** Deletes expired files (not those kept for a batch) and the lines a crash left loose; resolves with how many. */
  async sweep(): Promise<number> {
    // What to remove is read first, then removed: no read transaction stays open across the writes.
    const now = this.now();
    const loose = [...this.loose.getRange()]
      .filter(({ key, value }) => !this.writing.has(key) && !this.records.get(key) && this.left(value, now))
      .map(({ key }) => key);
    const expired = [...this.records.getRange()].map(({ value }) => value).filter((r) => r.expiresAt <= now && !this.keep(r.id));
    for (const id of loose) await this.removeLines(id);
    let forgotten = 0;
    for (const record of expired) if (await this.forget(record)) forgotten++;
    return loose.length + forgotten;
  }

  /** Whether a loose mark was left by a run that is over: this replica's last one, or another replica long ago. */
  private left(mark: LooseMark, now: number): boolean {
    // `true`: a mark of a release that had no replicas, whose one process is this one.
    if (mark === true || mark.replica === this.replica) return true;
    return now - mark.at > LOOSE_GRACE_MS;
  }

  /** Takes `bytes` of the project's room until the returned function gives it back; QuotaExceeded past it. */
  private reserve(project: string, bytes: number): () => void {
    // Checked and taken in one synchronous step: uploads of one project at the same moment cannot pass the room together.
    const used = this.usedBytes(project) + (this.reserved.get(project) ?? 0);
    if (used + bytes > this.options.maxBytesPerProject) throw new QuotaExceeded(used, this.options.maxBytesPerProject, bytes);
    this.reserved.set(project, (this.reserved.get(project) ?? 0) + bytes);
    return () => {
      const left = (this.reserved.get(project) ?? 0) - bytes;
      if (left > 0) this.reserved.set(project, left);
      else this.reserved.delete(project);
    };
  }

  private putRecord(tx: Tx, record: FileRecord): void {
    tx.put('files', record.id, record);
    tx.put('files-by-project', [record.project, record.createdAt, record.id], true);
    tx.remove('files-loose', record.id);
  }

  private live(project: string, id: string): FileRecord | null {
    const record = this.records.get(id);
    if (!record || record.project !== project || record.expiresAt <= this.now()) return null;
    return record;
  }

  /**
   * The record goes (and the file is marked loose) in one change; its lines follow. False when the record was gone
   * already (another replica's sweep deleted it first): its lines are that replica's to remove.
   */
  private async forget(record: FileRecord): Promise<boolean> {
    const mark: LooseMark = { replica: this.replica, at: this.now() };
    const forgotten = await this.store.update((tx) => {
      if (!tx.get('files', record.id)) return false;
      tx.remove('files', record.id);
      tx.remove('files-by-project', [record.project, record.createdAt, record.id]);
      tx.put('files-loose', record.id, mark);
      return true;
    });
    if (forgotten) await this.removeLines(record.id);
    return forgotten;
  }

  /** Removes the file's lines, some at a time, then its loose mark. */
  private async removeLines(id: string): Promise<void> {
    // Each round starts after the last line it removed: it ends whatever this copy still shows.
    for (let from = 0; ;) {
      const keys = [...this.lines.getKeys({ start: [id, from], end: [id, LAST], limit: LINES_PER_TRANSACTION })];
      if (!keys.length) break;
      await this.store.update((tx) => {
        for (const key of keys) tx.remove('file-lines', key);
      });
      from = keys[keys.length - 1]![1] + 1;
    }
    await this.store.update((tx) => tx.remove('files-loose', id));
  }
}

/** Who left a file's lines without its record, and when (`true`: a mark from before replicas). */
type LooseMark = { replica: string; at: number } | true;

function objectOf(record: FileRecord): FileObject {
  return {
    id: record.id,
    object: 'file',
    bytes: record.bytes,
    created_at: Math.floor(record.createdAt / 1000),
    expires_at: Math.floor(record.expiresAt / 1000),
    filename: record.filename,
    purpose: record.purpose,
    status: 'processed',
  };
}
