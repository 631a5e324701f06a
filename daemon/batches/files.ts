// Files of the Batch API (/v1/files): a batch's input, as uploaded and scrubbed, and the output and error files its
// batch writes. Each is kept in lmdb as its record and its lines, one entry per line, so a batch reads the line it
// runs and writes the line it answered without rewriting a whole file. A file belongs to its project (another
// project's is as if absent), counts against the project's room (files.maxBytesPerProject), and is deleted once it
// expires (files.ttlSeconds) — except the input of a batch that has not ended, kept (though no longer served) until it
// has. Only scrubbed text is ever written here: the caller scrubs each line before it is stored.
import { randomBytes } from 'node:crypto';
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';

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

/** Lines written or removed per lmdb transaction: a large file never holds the event loop in one long transaction. */
const LINES_PER_TRANSACTION = 1000;
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
  readonly lines: Database<string, [string, number]>;
  /**
   * Files whose lines may be on disk without their record: an upload being written, a file being deleted. Each is
   * marked here in the same transaction that makes its record absent, and the mark goes with its last line, so a crash
   * in between leaves lines the next start removes.
   */
  private readonly loose: Database<true, string>;
  /** Bytes of uploads being written, per project: counted against its room until their records exist. */
  private readonly reserved = new Map<string, number>();
  /** Uploads being written now: loose, but not left by a crash. */
  private readonly writing = new Set<string>();
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
    this.loose = store.db<true>('files-loose');
    this.now = options.now ?? Date.now;
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
      await this.loose.put(id, true);
      for (let from = 0; from < file.lines.length; from += LINES_PER_TRANSACTION) {
        await this.lines.transaction(() => {
          const to = Math.min(from + LINES_PER_TRANSACTION, file.lines.length);
          for (let i = from; i < to; i++) void this.lines.put([id, i], file.lines[i]!);
        });
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
      await this.records.transaction(() => this.putRecord(record));
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
   * Inside a transaction: the record of a file whose lines are already written under `id` (a batch's output, written
   * line by line as its batch ran). Answers its object.
   */
  putWritten(project: string, id: string, file: { filename: string; bytes: number; lines: number }): FileObject {
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
    this.putRecord(record);
    return objectOf(record);
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
    await this.forget(record);
    await this.store.flushed();
    return true;
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
    const loose = [...this.loose.getKeys()].filter((id) => !this.writing.has(id) && !this.records.get(id));
    const now = this.now();
    const expired = [...this.records.getRange()].map(({ value }) => value).filter((r) => r.expiresAt <= now && !this.keep(r.id));
    for (const id of loose) await this.removeLines(id);
    for (const record of expired) await this.forget(record);
    return loose.length + expired.length;
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

  private putRecord(record: FileRecord): void {
    void this.records.put(record.id, record);
    void this.byProject.put([record.project, record.createdAt, record.id], true);
    void this.loose.remove(record.id);
  }

  private live(project: string, id: string): FileRecord | null {
    const record = this.records.get(id);
    if (!record || record.project !== project || record.expiresAt <= this.now()) return null;
    return record;
  }

  /** The record goes (and the file is marked loose) in one transaction; its lines follow. */
  private async forget(record: FileRecord): Promise<void> {
    await this.records.transaction(() => {
      void this.records.remove(record.id);
      void this.byProject.remove([record.project, record.createdAt, record.id]);
      void this.loose.put(record.id, true);
    });
    await this.removeLines(record.id);
  }

  /** Removes the file's lines, some at a time, then its loose mark. */
  private async removeLines(id: string): Promise<void> {
    for (;;) {
      const keys = [...this.lines.getKeys({ start: [id, 0], end: [id, LAST], limit: LINES_PER_TRANSACTION })];
      if (!keys.length) break;
      await this.lines.transaction(() => {
        for (const key of keys) void this.lines.remove(key);
      });
    }
    await this.loose.remove(id);
  }
}

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
