// When the data directory cannot take a write: its disk is full (ENOSPC), a quota is used up (EDQUOT), the file system
// is read-only (EROFS) or the device fails (EIO; lmdb reports some writes to a full disk so too). Every store meets
// these the same way: the write fails, the call that needed it gets 503 storage_unavailable (http/errors.ts), what
// needs no write goes on, and health says why until a write succeeds again. None of it may end the process.
import { closeSync, fsyncSync, openSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';

const BY_ERRNO: Record<number, WriteFailureCode> = { 5: 'EIO', 28: 'ENOSPC', 30: 'EROFS', 122: 'EDQUOT' };
const WHY = {
  ENOSPC: 'the disk is full',
  EDQUOT: 'the disk quota is used up',
  EROFS: 'the file system is read-only',
  EIO: 'the device reports input/output errors (a full disk can show so)',
  COMMIT: 'a database commit failed',
} as const;

export type WriteFailureCode = keyof typeof WHY;

/**
 * What stops writes in `err`, or null when it is another kind of error. Node's file errors name their errno (`code:
 * 'ENOSPC'`); lmdb's carry its number (`code: 28`), and a failed asynchronous commit is "Commit failed" with its cause
 * in a promise (`commitError`).
 */
export function writeFailureOf(err: unknown): WriteFailureCode | null {
  if (!(err instanceof Error)) return null;
  const code = (err as NodeJS.ErrnoException).code as unknown;
  if (typeof code === 'string' && Object.hasOwn(WHY, code) && code !== 'COMMIT') return code as WriteFailureCode;
  if (typeof code === 'number' && isLmdbError(err)) return BY_ERRNO[code] ?? null;
  if (isFailedCommit(err)) return 'COMMIT';
  return null;
}

/** lmdb-js's error for a failed asynchronous commit; its cause settles later, in `commitError`. */
function isFailedCommit(err: Error): err is Error & { commitError: PromiseLike<unknown> } {
  const cause = (err as { commitError?: unknown }).commitError;
  return err.message.startsWith('Commit failed') && typeof (cause as PromiseLike<unknown> | undefined)?.then === 'function';
}

/** An error lmdb's native code raised (an errno as a number, thrown from lmdb's own files). */
function isLmdbError(err: Error): boolean {
  return /[/\\]lmdb[/\\]/.test(err.stack ?? '');
}

/** A line for operators and clients: what failed, why, and what to do. */
export function describeWriteFailure(code: WriteFailureCode, detail: string): string {
  return `the data directory cannot be written: ${WHY[code]} (${detail}). Free space on its disk, or make it writable`;
}

/** A short write to a regular file means the disk had no room for the rest (POSIX write(2)). */
export function shortWriteError(written: number, wanted: number, what: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`ENOSPC: no space left on device (${what} wrote ${written} of ${wanted} bytes)`), { code: 'ENOSPC' });
}

/**
 * Whether the data directory takes writes, for health: the first failure since the last success is kept, and while
 * there is one a probe writes every few seconds; the first that succeeds clears it.
 */
export class WriteHealth {
  private failure: { code: WriteFailureCode; problem: string; since: string } | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    /** Throws while a write to the data directory fails. */
    private readonly probe: () => void,
    private readonly probeMs = 2_000,
  ) {}

  /** Records `err` if it is a write failure (returns its code), or returns null and records nothing. */
  note(err: unknown, where: string): WriteFailureCode | null {
    const code = writeFailureOf(err);
    if (!code) return null;
    // A failed commit's cause comes later: it says more (the disk is full) than that the commit failed.
    if (code === 'COMMIT') {
      const cause = (err as { commitError: PromiseLike<unknown> }).commitError;
      Promise.resolve(cause).then(undefined, (why: unknown) => {
        if (this.failure?.code === 'COMMIT' && writeFailureOf(why)) this.note(why, where);
      });
    }
    if (!this.failure || (this.failure.code === 'COMMIT' && code !== 'COMMIT')) {
      const problem = `${describeWriteFailure(code, `${where}: ${(err as Error).message}`)}; until then calls that must write get 503, and they succeed again once it can be written`;
      this.failure = { code, problem, since: this.failure?.since ?? new Date().toISOString() };
    }
    if (!this.timer) {
      this.timer = setInterval(() => this.check(), this.probeMs);
      this.timer.unref();
    }
    return code;
  }

  /** Why writes fail, and since when; null while they succeed. */
  get state(): { problem: string; since: string } | null {
    return this.failure && { problem: this.failure.problem, since: this.failure.since };
  }

  /** Tries a write now: whether the data directory takes one (a success clears the failure). */
  writable(): boolean {
    try {
      this.probe();
    } catch {
      return false;
    }
    this.failure = null;
    this.stop();
    return true;
  }

  private check(): void {
    this.writable();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

/** Writes, syncs and removes a small file in `dir`: throws while the directory cannot take a write. */
export function probeDirectory(dir: string): void {
  const file = join(dir, '.write-probe');
  const fd = openSync(file, 'w', 0o600);
  try {
    // A whole page: a byte can still fit in the last page of a file on a full disk.
    const page = Buffer.alloc(4096);
    const written = writeSync(fd, page);
    if (written !== page.length) throw shortWriteError(written, page.length, 'the write probe');
    fsyncSync(fd);
  } finally {
    closeSync(fd);
    unlinkSync(file);
  }
}

/**
 * lmdb-js makes promises of its own for the batches it commits, and one for each failed commit's cause
 * (`commitError`), that no caller holds: when a commit fails (a full disk) they reject unhandled, which would end the
 * process. This takes those in, reports them, and leaves every other unhandled rejection to end the process as it
 * would have. Returns the function that removes it.
 */
export function absorbCommitFailures(report: (err: Error) => void): () => void {
  const listener = (reason: unknown) => {
    if (!(reason instanceof Error) || (!isFailedCommit(reason) && !(isLmdbError(reason) && writeFailureOf(reason)))) throw reason;
    if (isFailedCommit(reason)) {
      // Every failed write of that commit shares one cause: reported through the first, handled for all.
      Promise.resolve(reason.commitError).then(undefined, (cause: unknown) => report(cause instanceof Error ? cause : reason));
    } else report(reason);
  };
  process.on('unhandledRejection', listener);
  return () => process.off('unhandledRejection', listener);
}
