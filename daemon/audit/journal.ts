// The audit log's write-ahead journal: what makes an entry durable before its response leaves. An lmdb commit with
// its sync costs far more, and far less evenly, than an append to one file opened with O_DSYNC (each write returns
// once it is on disk). So each entry is appended here (every entry that arrives while a write is running shares the
// next one: group commit), acknowledged once written, and written to lmdb in the background. At start, entries the
// journal holds beyond what lmdb has are replayed into it; a record torn by a crash mid-write was never acknowledged
// and MUST be dropped. Files rotate once lmdb has everything they hold on disk.
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
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { crc32 } from 'node:zlib';
import { shortWriteError } from '../store/index.js';

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
 * The file, in the data directory, naming the log (a random id) and every directory that may hold journal files
 * lmdb has not been checked against: the journal's own, and where it was before it moved until those files are
 * replayed and removed.
 */
export const JOURNAL_DIRS_FILE = 'audit-journal-dirs.json';
/**
 * In each directory the list names, the log's id: a listed directory without it is not the one the journal was kept
 * in (most often: its device is not mounted, and the empty mount point shows instead).
 */
const MARK = 'audit-journal-log.id';

export interface JournalDirs {
  log: string;
  dirs: string[];
}

/** What `file` says (a new log id and no directory if it does not exist). */
export function readJournalDirs(file: string): JournalDirs {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { log: randomUUID(), dirs: [] };
    throw err;
  }
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file} is damaged: ${(err as Error).message}`);
  }
  const { log, dirs } = (list ?? {}) as Partial<JournalDirs>;
  if (typeof log !== 'string' || !Array.isArray(dirs) || !dirs.every((d) => typeof d === 'string')) {
    throw new Error(`${file} should hold {"log": "<id>", "dirs": ["<directory>", …]}`);
  }
  return { log, dirs };
}

/** Replaces `file` with `list`, durably: a crash leaves the old list or the new one, whole. */
export function writeJournalDirs(file: string, list: JournalDirs): void {
  writeDurably(file, `${JSON.stringify(list)}\n`);
}

function writeDurably(file: string, text: string): void {
  const temporary = `${file}.new`;
  const fd = openSync(temporary, 'w', 0o600);
  try {
    writeFileSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temporary, file);
  syncDirectory(dirname(file));
}

/** The log id marked in `dir`, null if none. */
function markIn(dir: string): string | null {
  try {
    return readFileSync(join(dir, MARK), 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
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
    try {
      syncDirectory(this.dir);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    return fd;
  }

  /**
   * Opens the journal in `dir` (made if missing, and marked with the log's id): every record the existing files
   * hold, in `dir`, in the directories `list` names and in `former` ones (the data directory, where the journal was
   * before it could move), for the log to replay; the files they came from (to remove once lmdb has them on disk);
   * and a journal appending to a new file in `dir`. A listed directory must be there and bear the log's mark, and no
   * directory may bear another log's: the start stops instead of losing entries or replaying another log's.
   */
  static open(
    dir: string,
    lmdbFlushed: () => Promise<void>,
    list: JournalDirs,
    former: string[] = [],
  ): { journal: AuditJournal; records: JournalRecord[]; files: string[] } {
    const records: JournalRecord[] = [];
    const files: string[] = [];
    const listed = new Set(list.dirs);
    const giveUp = `remove it from ${JOURNAL_DIRS_FILE} in the data directory to start without the entries it held that the database lacks`;
    let last = 0;
    for (const from of new Set([...listed, ...former, dir])) {
      const which = from === dir ? `${from} (audit.journalDir, default the data directory)` : from;
      let mark: string | null;
      let generations: number[];
      try {
        mark = markIn(from);
        generations = generationsIn(from, !listed.has(from));
        for (const g of generations) {
          const file = join(from, `${PREFIX}${g}`);
          records.push(...decode(readFileSync(file)));
          files.push(file);
        }
      } catch (err) {
        const why = (err as Error).message;
        if (listed.has(from)) {
          throw new Error(
            `cannot read the audit journal files in ${which}, where the journal has been kept (${why}). Make it readable ` +
              `again (mount its device) and restart; if it is lost for good, ${giveUp}.`,
          );
        }
        throw new Error(
          from === dir ? `cannot keep the audit journal in ${which}: ${why}` : `cannot read the audit journal files in ${from}: ${why}`,
        );
      }
      if (listed.has(from) && mark !== list.log) {
        throw new Error(
          `${which} is where the audit journal has been kept, but it holds no ${MARK} of this log: its device is not ` +
            `mounted? Mount it and restart; if it is lost for good, ${giveUp}.`,
        );
      }
      // (The data directory holds lmdb itself: journal files there are this log's whatever their mark says.)
      if (mark !== null && mark !== list.log && !former.includes(from)) {
        throw new Error(`${which} holds another audit log's journal (its ${MARK} differs): empty it, or keep this journal elsewhere.`);
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
      if (markIn(dir) !== list.log) writeDurably(join(dir, MARK), `${list.log}\n`);
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
    try {
      if (this.bytes >= ROTATE_BYTES) this.rotate();
    } catch (err) {
      // No new file (a full disk): the journal stops like after a failed write, and every waiting append is told.
      this.failure ??= err as Error;
      for (const w of this.waiters.splice(0)) w.reject(this.failure);
      this.queue = [];
      return;
    }
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
        done(written === batch.length ? null : shortWriteError(written, batch.length, 'the audit journal'));
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
    // The new file first: if it cannot be made, the old one stays open and current.
    const fd = this.create(this.generation + 1);
    closeSync(this.fd);
    this.generation++;
    this.fd = fd;
    this.bytes = 0;
    this.lmdbFlushed()
      .then(() => AuditJournal.discard([old]))
      .catch(() => {
        // lmdb failed, or the file could not be removed: it stays for the next start's replay.
      });
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
