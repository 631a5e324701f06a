// PDFs are read in worker threads, never on the event loop: pdf.js works synchronously while it decodes a stream or
// walks a page's operators, so on the event loop a small compression bomb, or a page of millions of text operators,
// would hold every other call for seconds. Each document is read under a time budget (its worker is terminated
// when it is over) and a memory budget, half for the worker's JavaScript heap (V8's resourceLimits) and half for its
// buffers (memory-budget.ts). At most `workers` documents are read at once and `queue` more wait; past that an upload
// gets 503 with Retry-After.
//
// Workers are kept for the next document: starting one and loading pdf.js into it costs far more than reading a small
// PDF in a warm one. A worker that went over a budget, failed, or holds much
// of its budget afterwards is not reused; an idle one ends after a minute.
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import { Slots } from '../../engines/slots.js';
import { ApiError } from '../../errors/index.js';
import { ExtractionError } from './extraction-error.js';
import { OVER_MEMORY_EXIT } from './memory-budget.js';
import type { PdfReply, PdfThreadData } from './pdf-messages.js';

export interface PdfBudget {
  /** Documents read at once, each in a worker of its own; 0: from the core count (defaultPdfWorkers). */
  workers: number;
  /** Uploads that may wait for a worker. */
  queue: number;
  timeoutMs: number;
  memoryMb: number;
}

export const DEFAULT_PDF_BUDGET: PdfBudget = { workers: 0, queue: 8, timeoutMs: 60_000, memoryMb: 512 };

/** Half the cores, 1 to 4: reading a PDF takes a core, and the event loop and the engines need theirs. */
export function defaultPdfWorkers(cores = availableParallelism()): number {
  return Math.max(1, Math.min(4, Math.floor(cores / 2)));
}

const THREAD = new URL('./pdf-thread.js', import.meta.url);
const IDLE_MS = 60_000;
const MIB = 1024 * 1024;
/** Retrying a refused upload sends the whole file again: not every second. */
const RETRY_AFTER_SECONDS = 5;

type Outcome = PdfReply | { kind: 'exit'; code: number; error: (Error & { code?: string }) | undefined };

/** One worker thread and what it is waiting for. Its 'error' listener is permanent: an unheard one would crash the daemon. */
class PdfThread {
  readonly worker: Worker;
  /** Hears the next message or the end of the thread. */
  waiter: ((outcome: Outcome) => void) | null = null;
  idleTimer: NodeJS.Timeout | undefined;
  private error: (Error & { code?: string }) | undefined;

  constructor(memoryMb: number, onExit: (thread: PdfThread) => void) {
    const half = Math.floor(memoryMb / 2);
    // Both generations are set: the young one would otherwise follow the daemon's own --max-semi-space-size.
    const young = Math.max(8, Math.floor(half / 8));
    this.worker = new Worker(THREAD, {
      workerData: { bufferBytes: half * MIB } satisfies PdfThreadData,
      resourceLimits: { maxOldGenerationSizeMb: half - young, maxYoungGenerationSizeMb: young },
    });
    this.worker.on('message', (reply: PdfReply) => this.waiter?.(reply));
    this.worker.on('error', (err: Error) => (this.error ??= err));
    this.worker.once('exit', (code) => {
      clearTimeout(this.idleTimer);
      this.waiter?.({ kind: 'exit', code, error: this.error });
      onExit(this);
    });
  }

  next(): Promise<Outcome> {
    return new Promise((resolve) => {
      this.waiter = (outcome) => {
        this.waiter = null;
        resolve(outcome);
      };
    });
  }
}

export class PdfWorkers {
  private readonly slots: Slots;
  private readonly threads = new Set<PdfThread>();
  private readonly idle: PdfThread[] = [];
  private closed = false;

  constructor(private readonly budget: PdfBudget) {
    this.slots = new Slots({
      parallel: budget.workers || defaultPdfWorkers(),
      queue: budget.queue,
      label: 'The PDF reader',
      retryAfterSeconds: RETRY_AFTER_SECONDS,
    });
  }

  /** The text of a PDF (extractText's), read in a worker; ExtractionError when it cannot be read within the budgets. */
  async read(bytes: Uint8Array, signal: AbortSignal): Promise<string> {
    if (this.closed) throw shuttingDown();
    const release = await this.slots.acquire(signal);
    try {
      if (this.closed) throw shuttingDown();
      const thread = this.idle.pop() ?? (await this.start());
      clearTimeout(thread.idleTimer);
      thread.worker.ref();
      return await this.run(thread, bytes, signal);
    } finally {
      release();
    }
  }

  /** Ends every worker, reading or idle. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.threads].map((t) => t.worker.terminate()));
  }

  private async start(): Promise<PdfThread> {
    const thread = new PdfThread(this.budget.memoryMb, (t) => {
      this.threads.delete(t);
      const i = this.idle.indexOf(t);
      if (i >= 0) this.idle.splice(i, 1);
    });
    this.threads.add(thread);
    const outcome = await thread.next();
    if (outcome.kind === 'ready') return thread;
    if (this.closed) throw shuttingDown();
    void thread.worker.terminate();
    const why = outcome.kind === 'exit' ? (outcome.error?.message ?? `exit code ${outcome.code}`) : outcome.kind;
    throw new Error(`the PDF worker thread did not start (${why})`);
  }

  private async run(thread: PdfThread, bytes: Uint8Array, signal: AbortSignal): Promise<string> {
    let stopped: Error | undefined;
    const stop = (why: Error) => {
      stopped ??= why;
      void thread.worker.terminate();
    };
    const timer = setTimeout(() => stop(this.tooSlow()), this.budget.timeoutMs);
    const onAbort = () => stop(signal.reason instanceof Error ? signal.reason : new Error('the client went away'));
    signal.addEventListener('abort', onAbort, { once: true });
    if (signal.aborted) onAbort();
    const outcome = thread.next();
    // A copy goes to the thread: the upload's bytes may share their memory with other buffers.
    thread.worker.postMessage(bytes);
    try {
      const result = await outcome;
      switch (result.kind) {
        case 'text':
          this.keep(thread, result.memoryBytes);
          return result.text;
        case 'refused':
          this.keep(thread, result.memoryBytes);
          throw new ExtractionError(result.message);
        case 'exit':
          if (stopped) throw stopped;
          if (this.closed) throw shuttingDown();
          if (result.code === OVER_MEMORY_EXIT || result.error?.code === 'ERR_WORKER_OUT_OF_MEMORY') throw this.tooLarge();
          throw unreadable(result.error?.message ?? `its reader stopped with code ${result.code}`);
        default:
          void thread.worker.terminate();
          throw unreadable(result.kind === 'failed' ? result.message : `its reader answered '${result.kind}'`);
      }
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    }
  }

  /** Back to the idle list, unless the document left it holding more than half its budget (or the pool is closed). */
  private keep(thread: PdfThread, memoryBytes: number): void {
    if (this.closed || memoryBytes > (this.budget.memoryMb * MIB) / 2) {
      void thread.worker.terminate();
      return;
    }
    thread.worker.unref();
    thread.idleTimer = setTimeout(() => void thread.worker.terminate(), IDLE_MS).unref();
    this.idle.push(thread);
  }

  private tooSlow(): ExtractionError {
    const seconds = Math.round(this.budget.timeoutMs / 100) / 10;
    return new ExtractionError(
      `The PDF is too complex to read in ${seconds} s (documents.pdf.timeoutMs), so reading it was stopped. Split it into smaller files, or print it to a new, simpler PDF, and upload that.`,
    );
  }

  private tooLarge(): ExtractionError {
    return new ExtractionError(
      `Reading the PDF needs more than ${this.budget.memoryMb} MiB of memory (documents.pdf.memoryMb): its content expands far beyond the file's size. Split it into smaller files, or print it to a new, simpler PDF, and upload that.`,
      413,
    );
  }
}

function unreadable(detail: string): ExtractionError {
  return new ExtractionError(
    `The PDF could not be read (${detail.replace(/\.$/, '')}). It may be damaged: export or save it again and upload the new copy.`,
  );
}

function shuttingDown(): ApiError {
  return new ApiError('server_overloaded', 'The server is shutting down. Retry in a few seconds.', {
    headers: { 'retry-after': String(RETRY_AFTER_SECONDS) },
  });
}
