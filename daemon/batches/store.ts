// Batches (/v1/batches) and the state of each of their lines, in lmdb. A line is done once its answer is written: the
// answer (into the batch's output or error file), the line's mark and the batch's counts change in one transaction,
// so after a crash every line is either done, with its answer written once, or not done and run again. Batches that
// have not ended are listed apart, for the runner to resume at the next start.
//
// Batches are shared state (store: postgres): every change is one `Store.update` that reads the batch (and a line's
// mark) in it, so changes made at once on two replicas (an answer and a cancel, one line answered twice after a
// takeover) are applied one after the other, each on the other's result.
import { randomBytes } from 'node:crypto';
import type { Database } from 'lmdb';
import { findFresh, type SharedChange, type Store, type Tx } from '../store/index.js';
import { newFileId, type FileObject, type FileStore } from './files.js';

export type BatchStatus = 'validating' | 'in_progress' | 'finalizing' | 'completed' | 'failed' | 'expired' | 'cancelling' | 'cancelled';

/** How a batch ended. */
export type FinalStatus = 'completed' | 'failed' | 'expired' | 'cancelled';

const ENDED: ReadonlySet<BatchStatus> = new Set(['completed', 'failed', 'expired', 'cancelled']);

export interface BatchError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

export interface BatchRecord {
  id: string;
  project: string;
  /** The key that made it: its lines run as that key's calls. */
  key: string;
  endpoint: string;
  inputFileId: string;
  completionWindow: string;
  metadata: Record<string, string> | null;
  status: BatchStatus;
  total: number;
  completed: number;
  failed: number;
  /** Ids its output and error files will have; each exists (and is answered) only once the batch ends with lines in it. */
  outputFileId: string;
  errorFileId: string;
  outputLines: number;
  outputBytes: number;
  errorLines: number;
  errorBytes: number;
  outputFile: boolean;
  errorFile: boolean;
  errors: BatchError[] | null;
  /** Seconds since the epoch, as OpenAI's batch object has them. */
  createdAt: number;
  expiresAt: number;
  inProgressAt: number | null;
  finalizingAt: number | null;
  completedAt: number | null;
  failedAt: number | null;
  expiredAt: number | null;
  cancellingAt: number | null;
  cancelledAt: number | null;
}

/** OpenAI's batch object. */
export function batchObject(record: BatchRecord) {
  return {
    id: record.id,
    object: 'batch' as const,
    endpoint: record.endpoint,
    errors: record.errors ? { object: 'list', data: record.errors } : null,
    input_file_id: record.inputFileId,
    completion_window: record.completionWindow,
    status: record.status,
    output_file_id: record.outputFile ? record.outputFileId : null,
    error_file_id: record.errorFile ? record.errorFileId : null,
    created_at: record.createdAt,
    in_progress_at: record.inProgressAt,
    expires_at: record.expiresAt,
    finalizing_at: record.finalizingAt,
    completed_at: record.completedAt,
    failed_at: record.failedAt,
    expired_at: record.expiredAt,
    cancelling_at: record.cancellingAt,
    cancelled_at: record.cancelledAt,
    request_counts: { total: record.total, completed: record.completed, failed: record.failed },
    metadata: record.metadata,
  };
}

export type BatchObject = ReturnType<typeof batchObject>;

/** What a line's mark says: answered with a success, answered with an error, or never run (the batch ended first). */
const ANSWERED = 1;
const FAILED = 2;
const NOT_RUN = 3;

const seconds = (ms: number) => Math.floor(ms / 1000);

export class BatchStore {
  private readonly batches: Database<BatchRecord, string>;
  private readonly byProject: Database<true, [string, number, string]>;
  /** Batches that have not ended. */
  private readonly active: Database<true, string>;
  /** [batch id, line index] → ANSWERED, FAILED or NOT_RUN, once the line is done. */
  private readonly marks: Database<number, [string, number]>;
  private readonly listeners = new Set<() => void>();
  /** Each batch's changes from this replica, one after another: parallel lines of a batch do not conflict. */
  private readonly changing = new Map<string, Promise<unknown>>();

  constructor(
    private readonly store: Store,
    private readonly files: FileStore,
    private readonly now: () => number = Date.now,
  ) {
    this.batches = store.db<BatchRecord>('batches');
    this.byProject = store.db<true, [string, number, string]>('batches-by-project');
    this.active = store.db<true>('batches-active');
    this.marks = store.db<number, [string, number]>('batch-lines');
    // An unfinished batch's input is kept, though it expire, until the batch has read it to the end.
    files.keepWhile((id) => this.readsFile(id));
    // Batches made or cancelled through other replicas (store: postgres) wake this one's runner too; a line answered
    // there (the counts move) does not.
    store.onChange('batches', (changes) => {
      const moved = ({ value, previous }: SharedChange) =>
        (value as BatchRecord | undefined)?.status !== (previous as BatchRecord | undefined)?.status;
      if (changes.some(moved)) this.changed();
    });
  }

  /** Calls `listener` whenever a batch is made or asked to stop, here or through another replica (the runner wakes). */
  onChange(listener: () => void): void {
    this.listeners.add(listener);
  }

  /** A new batch of the project's file `input` (its `lines` lines); durably on disk before it resolves. */
  async create(
    project: string,
    key: string,
    request: { inputFileId: string; lines: number; endpoint: string; completionWindow: string; metadata: Record<string, string> | null },
    windowMs: number,
  ): Promise<BatchRecord> {
    const createdMs = this.now();
    const record: BatchRecord = {
      id: `batch_${randomBytes(12).toString('hex')}`,
      project,
      key,
      endpoint: request.endpoint,
      inputFileId: request.inputFileId,
      completionWindow: request.completionWindow,
      metadata: request.metadata,
      status: 'validating',
      total: request.lines,
      completed: 0,
      failed: 0,
      outputFileId: newFileId(),
      errorFileId: newFileId(),
      outputLines: 0,
      outputBytes: 0,
      errorLines: 0,
      errorBytes: 0,
      outputFile: false,
      errorFile: false,
      errors: null,
      createdAt: seconds(createdMs),
      expiresAt: seconds(createdMs + windowMs),
      inProgressAt: null,
      finalizingAt: null,
      completedAt: null,
      failedAt: null,
      expiredAt: null,
      cancellingAt: null,
      cancelledAt: null,
    };
    await this.store.update((tx) => {
      tx.put('batches', record.id, record);
      tx.put('batches-by-project', [project, createdMs, record.id], true);
      tx.put('batches-active', record.id, true);
    });
    await this.store.flushed();
    this.changed();
    return record;
  }

  /** The project's batch; null when it has none by that id. */
  get(project: string, id: string): BatchRecord | null {
    const record = this.batches.get(id);
    return record && record.project === project ? record : null;
  }

  /**
   * `find` on this replica's copy, and on a miss once more after catching up (store: postgres), so a batch made
   * through another replica a moment ago is found here.
   */
  fresh<T>(find: (batches: this) => T): Promise<T> {
    return findFresh(this.store, () => find(this));
  }

  /** Any batch by id (the runner's read). */
  record(id: string): BatchRecord | null {
    return this.batches.get(id) ?? null;
  }

  /** Whether the batch has ended (or is unknown here). */
  ended(id: string): boolean {
    const record = this.batches.get(id);
    return !record || ENDED.has(record.status);
  }

  /** The project's batches, newest first. */
  list(project: string): BatchRecord[] {
    const out: BatchRecord[] = [];
    for (const { key } of this.byProject.getRange({ start: [project, '\uffff'], end: [project], reverse: true })) {
      const record = this.batches.get(key[2]);
      if (record) out.push(record);
    }
    return out;
  }

  /** How many of the project's batches have not ended. */
  unfinishedCount(project: string): number {
    let n = 0;
    for (const { key } of this.active.getRange()) if (this.batches.get(key)?.project === project) n++;
    return n;
  }

  /** The batches that have not ended, oldest first. */
  unfinished(): BatchRecord[] {
    const out: BatchRecord[] = [];
    for (const { key } of this.active.getRange()) {
      const record = this.batches.get(key);
      if (record) out.push(record);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt);
  }

  /**
   * Asks the project's batch to stop: `cancelling` until the lines in progress are done, then `cancelled`. Null when
   * there is no such batch; the batch as it stands when it has already ended (the caller refuses that).
   */
  async cancel(project: string, id: string): Promise<BatchRecord | null> {
    const record = this.get(project, id);
    if (!record) return null;
    if (ENDED.has(record.status) || record.status === 'cancelling') return record;
    const updated = await this.update(id, (r) =>
      ENDED.has(r.status) || r.status === 'cancelling' ? null : { status: 'cancelling', cancellingAt: seconds(this.now()) },
    );
    this.changed();
    return updated;
  }

  /** Whether line `index` of the batch is done (answered, or marked as never run); in a change, as `tx` reads it. */
  isDone(id: string, index: number, tx?: Tx): boolean {
    return (tx ? tx.get<number>('batch-lines', [id, index]) : this.marks.get([id, index])) !== undefined;
  }

  /** Marks the batch as running its lines (from `validating`). */
  async started(id: string): Promise<BatchRecord> {
    return this.update(id, (r) => (r.status === 'validating' ? { status: 'in_progress', inProgressAt: seconds(this.now()) } : null));
  }

  /**
   * Line `index` answered: its output line goes into the output file (a success) or the error file, its mark is set and
   * the batch's counts move, in one transaction. A line already done, or of a batch that has ended, is left as it is (it is answered once).
   */
  async answered(id: string, index: number, succeeded: boolean, text: string): Promise<BatchRecord> {
    const bytes = Buffer.byteLength(text) + 1;
    return this.update(id, (r, tx) => {
      if (ENDED.has(r.status) || this.isDone(id, index, tx)) return null;
      tx.put('batch-lines', [id, index], succeeded ? ANSWERED : FAILED);
      if (succeeded) {
        tx.put('file-lines', [r.outputFileId, index], text);
        return { completed: r.completed + 1, outputLines: r.outputLines + 1, outputBytes: r.outputBytes + bytes };
      }
      tx.put('file-lines', [r.errorFileId, index], text);
      return { failed: r.failed + 1, errorLines: r.errorLines + 1, errorBytes: r.errorBytes + bytes };
    });
  }

  /** Lines the batch ended before running: each gets its line in the error file (`text` of its index), not counted as failed. */
  async notRun(id: string, indexes: readonly number[], text: (index: number) => string): Promise<void> {
    await this.update(id, (r, tx) => {
      if (ENDED.has(r.status)) return null;
      let lines = 0;
      let bytes = 0;
      for (const index of indexes) {
        if (this.isDone(id, index, tx)) continue;
        const line = text(index);
        tx.put('batch-lines', [id, index], NOT_RUN);
        tx.put('file-lines', [r.errorFileId, index], line);
        lines++;
        bytes += Buffer.byteLength(line) + 1;
      }
      return lines ? { errorLines: r.errorLines + lines, errorBytes: r.errorBytes + bytes } : null;
    });
  }

  /** Marks the batch `finalizing`: its lines are done, its files being made. */
  async finalizing(id: string): Promise<BatchRecord> {
    return this.update(id, (r) => (r.finalizingAt === null ? { status: 'finalizing', finalizingAt: seconds(this.now()) } : null));
  }

  /**
   * Ends the batch with `status`: its output and error files are made (those with lines) and it leaves the
   * unfinished list, its runner's lease going with it (store: postgres; leases.ts), in one transaction, durably.
   */
  async end(id: string, status: FinalStatus, errors: BatchError[] | null = null): Promise<BatchRecord> {
    const at = seconds(this.now());
    const stamp = { completed: 'completedAt', failed: 'failedAt', expired: 'expiredAt', cancelled: 'cancelledAt' } as const;
    const ended = await this.update(id, (r, tx) => {
      if (ENDED.has(r.status)) return null;
      const files: Array<FileObject | null> = [
        r.outputLines
          ? this.files.putWritten(tx, r.project, r.outputFileId, {
              filename: `${r.id}_output.jsonl`,
              bytes: r.outputBytes,
              lines: r.outputLines,
            })
          : null,
        r.errorLines
          ? this.files.putWritten(tx, r.project, r.errorFileId, {
              filename: `${r.id}_error.jsonl`,
              bytes: r.errorBytes,
              lines: r.errorLines,
            })
          : null,
      ];
      tx.remove('batches-active', id);
      tx.remove('batch-leases', id);
      return { status, [stamp[status]]: at, outputFile: files[0] !== null, errorFile: files[1] !== null, ...(errors ? { errors } : {}) };
    });
    await this.store.flushed();
    return ended;
  }

  /**
   * Removes the marks of an ended batch's lines, some at a time: they matter only while it runs (its counts and files
   * say the rest). One left by a crash on the way is harmless.
   */
  async forgetLines(id: string): Promise<void> {
    // Each round starts after the last mark it removed: it ends whatever this copy still shows.
    for (let from = 0; ;) {
      const keys = [...this.marks.getKeys({ start: [id, from], end: [id, Number.MAX_SAFE_INTEGER], limit: 1000 })];
      if (!keys.length) return;
      await this.store.update((tx) => {
        for (const key of keys) tx.remove('batch-lines', key);
      });
      from = keys[keys.length - 1]![1] + 1;
    }
  }

  /** Whether a batch that has not ended reads the file (its input). */
  private readsFile(fileId: string): boolean {
    for (const { key } of this.active.getRange()) if (this.batches.get(key)?.inputFileId === fileId) return true;
    return false;
  }

  /** Whether the project has a batch that has not ended reading the file. */
  inUse(project: string, fileId: string): boolean {
    for (const { key } of this.active.getRange()) {
      const record = this.batches.get(key);
      if (record?.project === project && record.inputFileId === fileId) return true;
    }
    return false;
  }

  /**
   * Changes the batch in one transaction: `change` reads it as it is inside the transaction and answers the fields to
   * set (null: nothing), writing what else it writes through `tx`. Resolves with the batch as it then stands.
   */
  private async update(id: string, change: (record: BatchRecord, tx: Tx) => Partial<BatchRecord> | null): Promise<BatchRecord> {
    const run = (this.changing.get(id) ?? Promise.resolve()).then(() =>
      this.store.update((tx) => {
        const record = tx.get<BatchRecord>('batches', id);
        if (!record) throw new Error(`no batch ${id}`);
        const fields = change(record, tx);
        if (!fields) return record;
        const next = { ...record, ...fields };
        tx.put('batches', id, next);
        return next;
      }),
    );
    const settled = run.catch(() => {});
    this.changing.set(id, settled);
    void settled.then(() => {
      if (this.changing.get(id) === settled) this.changing.delete(id);
    });
    return run;
  }

  private changed(): void {
    for (const listener of this.listeners) listener();
  }
}
