// The audit log's write-ahead journal: what makes an entry durable before its response leaves. An lmdb commit with
// its sync costs about a millisecond at best and tens at worst on this kind of disk; appending to one file opened
// with O_DSYNC (each write returns once it is on disk) costs about a tenth of that. So each entry is appended here
// (every entry that arrives while a write is running shares the next one: group commit), acknowledged once written,
// and written to lmdb in the background. At start, entries the journal holds beyond what lmdb has are replayed into
// it; a record torn by a crash mid-write was never acknowledged and is dropped. Files rotate once lmdb has everything
// they hold on disk.
//
// Record: u32 payload length, u32 CRC-32 of (index, payload), f64 leaf index, payload (the entry's canonical JSON);
// all little-endian.
import {
  closeSync,
  constants,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  write,
  writeFileSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { crc32 } from 'node:zlib';

const HEADER = 16;
/**
 * Every write is durable when it returns (O_DSYNC: the data and the size that reaches it, as fdatasync makes them):
 * one call to the thread pool per batch instead of a write and a sync.
 */
const OPEN_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND | constants.O_DSYNC;
const PREFIX = 'audit-journal.';
/** Past this size a journal file is replaced by a new one (and removed once lmdb has its entries on disk). */
const ROTATE_BYTES = 32 * 1024 * 1024;

export interface JournalRecord {
  index: number;
  payload: Buffer;
}

function encode(index: number, payload: Buffer): Buffer {
  const record = Buffer.allocUnsafe(HEADER + payload.length);
  record.writeUInt32LE(payload.length, 0);
  record.writeDoubleLE(index, 8);
  payload.copy(record, HEADER);
  record.writeUInt32LE(crc32(record.subarray(8)), 4);
  return record;
}

/** The whole records of one file, in order, stopping at the first torn or damaged one. */
function decode(bytes: Buffer): JournalRecord[] {
  const records: JournalRecord[] = [];
  let at = 0;
  while (at + HEADER <= bytes.length) {
    const length = bytes.readUInt32LE(at);
    const end = at + HEADER + length;
    if (end > bytes.length || crc32(bytes.subarray(at + 8, end)) !== bytes.readUInt32LE(at + 4)) break;
    records.push({ index: bytes.readDoubleLE(at + 8), payload: Buffer.from(bytes.subarray(at + HEADER, end)) });
    at = end;
  }
  return records;
}

/** The generations of the journal files in `dir`, oldest first (none if `dir` does not exist and may not). */
function generationsIn(dir: string, mayBeMissing: boolean): number[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' && mayBeMissing) return [];
    throw err;
  }
  return names
    .filter((name) => name.startsWith(PREFIX) && /^\d+$/.test(name.slice(PREFIX.length)))
    .map((name) => Number(name.slice(PREFIX.length)))
    .sort((a, b) => a - b);
}

/**
 * The file, in the data directory, naming every directory that may hold journal files lmdb has not been checked
 * against: the journal's own, and where it was before it moved until those files are replayed and removed.
 */
export const JOURNAL_DIRS_FILE = 'audit-journal-dirs.json';

/** The directories `file` names (none if it does not exist). */
export function readJournalDirs(file: string): string[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const dirs = JSON.parse(text) as unknown;
  if (!Array.isArray(dirs) || !dirs.every((d): d is string => typeof d === 'string')) {
    throw new Error(`${file} should be a JSON list of directories`);
  }
  return dirs;
}

/** Replaces `file` with the list `dirs`, durably: a crash leaves the old list or the new one, whole. */
export function writeJournalDirs(file: string, dirs: string[]): void {
  const temporary = `${file}.new`;
  const fd = openSync(temporary, 'w', 0o600);
  try {
    writeFileSync(fd, `${JSON.stringify(dirs)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temporary, file);
  syncDirectory(dirname(file));
}

/** Makes the entries of directory `path` durable (a new file's or directory's name). */
function syncDirectory(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

export class AuditJournal {
  private fd: number;
  private generation: number;
  private bytes = 0;
  private queue: Buffer[] = [];
  private waiters: Waiter[] = [];
  private writing: Promise<void> | null = null;
  private closed = false;
  /** The close in progress or done: closing twice waits for the first. */
  private closing: Promise<void> | null = null;
  /** Set by the first failed write or sync: nothing after a lost record may be acknowledged. */
  private failure: Error | null = null;

  private constructor(
    private readonly dir: string,
    generation: number,
    /** Resolves once lmdb has on disk every entry written to it so far. */
    private readonly lmdbFlushed: () => Promise<void>,
  ) {
    this.generation = generation;
    this.fd = this.create(generation);
  }

  /** A new journal file, its name made durable too (fdatasync covers the file, not the directory entry). */
  private create(generation: number): number {
    const fd = openSync(this.file(generation), OPEN_FLAGS, 0o600);
    syncDirectory(this.dir);
    return fd;
  }

  /**
   * Opens the journal in `dir` (made if missing): every record the existing files hold, in `dir` and where the
   * journal was before it moved, for the log to replay; the files they came from (to remove once lmdb has them on
   * disk); and a journal appending to a new file in `dir`. A `remembered` directory (one the journal was kept in)
   * must exist: a device not mounted would otherwise lose what it holds. A `former` one (the data directory, the
   * default place) may hold files or not.
   */
  static open(
    dir: string,
    lmdbFlushed: () => Promise<void>,
    elsewhere: { remembered?: string[]; former?: string[] } = {},
  ): { journal: AuditJournal; records: JournalRecord[]; files: string[] } {
    const records: JournalRecord[] = [];
    const files: string[] = [];
    const remembered = new Set(elsewhere.remembered);
    let last = 0;
    for (const from of new Set([...remembered, ...(elsewhere.former ?? []), dir])) {
      let generations: number[];
      try {
        generations = generationsIn(from, !remembered.has(from));
        for (const g of generations) {
          const file = join(from, `${PREFIX}${g}`);
          records.push(...decode(readFileSync(file)));
          files.push(file);
        }
      } catch (err) {
        const why = (err as Error).message;
        if (from === dir && !remembered.has(from)) {
          throw new Error(`cannot keep the audit journal in ${dir} (audit.journalDir, default the data directory): ${why}`);
        }
        if (!remembered.has(from)) throw new Error(`cannot read the audit journal files in ${from}: ${why}`);
        throw new Error(
          `cannot read the audit journal files in ${from}, where the journal has been kept (${why}). Make it readable ` +
            `again (mount its device) and restart; if it is lost for good, remove it from ${JOURNAL_DIRS_FILE} in the data ` +
            'directory to start without the entries it held that the database lacks.',
        );
      }
      if (from === dir) last = generations.at(-1) ?? 0;
    }
    try {
      // A directory made here is made durable as well: the journal's first file must not vanish with it in a crash.
      const made = mkdirSync(dir, { recursive: true, mode: 0o700 });
      for (let d = dir; ; d = dirname(d)) {
        syncDirectory(dirname(d));
        if (made === undefined || d === made) break;
      }
      return { journal: new AuditJournal(dir, last + 1, lmdbFlushed), records, files };
    } catch (err) {
      throw new Error(`cannot keep the audit journal in ${dir} (audit.journalDir, default the data directory): ${(err as Error).message}`);
    }
  }

  /** Removes journal files whose entries lmdb holds on disk. */
  static discard(files: string[]): void {
    for (const file of files) {
      try {
        unlinkSync(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
  }

  private file(generation: number): string {
    return join(this.dir, `${PREFIX}${generation}`);
  }

  /** Appends one entry; resolves once it is on disk. Entries are written in the order append is called. */
  append(index: number, payload: Buffer): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closed) return Promise.reject(new Error('the audit journal is closed'));
    this.queue.push(encode(index, payload));
    return new Promise<void>((resolve, reject) => {
      this.waiters.push({ resolve, reject });
      if (!this.writing) this.write();
    });
  }

  /** Writes everything queued, one batch at a time; appends made meanwhile wait for the next batch. */
  private write(): void {
    if (this.bytes >= ROTATE_BYTES) this.rotate();
    const records = this.queue;
    const waiters = this.waiters;
    this.queue = [];
    this.waiters = [];
    const fd = this.fd;
    this.writing = new Promise<void>((settled) => {
      const done = (err: Error | null) => {
        if (err && !this.failure) this.failure = err;
        const outcome = this.failure;
        for (const w of waiters) {
          if (outcome) w.reject(outcome);
          else w.resolve();
        }
        this.writing = null;
        settled();
        if (this.failure) {
          for (const w of this.waiters.splice(0)) w.reject(this.failure);
          this.queue = [];
        } else if (this.queue.length) this.write();
      };
      // One buffer, one write: the batch lands whole or the journal stops.
      const batch = records.length === 1 ? records[0]! : Buffer.concat(records);
      write(fd, batch, 0, batch.length, null, (err, written) => {
        if (err) return done(err);
        this.bytes += written;
        done(written === batch.length ? null : new Error(`the audit journal wrote ${written} of ${batch.length} bytes`));
      });
    });
  }

  /**
   * Starts a new file. No write is in flight (write() runs one batch at a time), so the old file is complete and
   * synced; it is removed once lmdb has on disk every entry it holds (lmdbFlushed issues the log's waiting writes
   * before it waits).
   */
  private rotate(): void {
    const old = this.file(this.generation);
    closeSync(this.fd);
    this.generation++;
    this.fd = this.create(this.generation);
    this.bytes = 0;
    this.lmdbFlushed().then(
      () => AuditJournal.discard([old]),
      () => {
        // lmdb failed: the file stays for the next start's replay.
      },
    );
  }

  /** Waits for the batch being written, then closes. Files stay until the next start has replayed them. */
  close(): Promise<void> {
    return (this.closing ??= this.closeOnce());
  }

  private async closeOnce(): Promise<void> {
    this.closed = true;
    while (this.writing) await this.writing;
    for (const w of this.waiters.splice(0)) w.reject(new Error('the audit journal is closed'));
    closeSync(this.fd);
  }
}
