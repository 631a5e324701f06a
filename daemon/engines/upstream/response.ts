// An upstream's response, read through undici's dispatch: each piece of its body goes straight to the one reader, with
// no stream in between. undici's request() makes a Readable and an async resource for every call, and their events
// and ticks cost more than reading a small answer. A body is read once: by each(), or thrown away by dump().
import type { Dispatcher } from 'undici';

/**
 * Bytes held for a reader that has not come yet (pieces that arrived with the headers, before the caller could
 * attach): past this the upstream is paused until it comes.
 */
const HELD_BEFORE_READER = 1024 * 1024;

/** What dump() reads of a body it throws away before it gives up on the connection instead (as undici's does). */
const DUMPED_AT_MOST = 128 * 1024;

interface Waiter {
  resolve: () => void;
  reject: (err: Error) => void;
}

export class UpstreamResponse {
  private held: Buffer[] = [];
  private heldBytes = 0;
  private reader: ((piece: Buffer) => void) | null = null;
  private waiter: Waiter | null = null;
  private ended = false;
  private failure: Error | null = null;
  private read = false;
  /** Set while the upstream is paused for a late reader. */
  private resumeUpstream: (() => void) | null = null;

  constructor(
    readonly statusCode: number,
    /** Names and values in turn, as they came. */
    private readonly rawHeaders: Buffer[],
    private readonly abort: (reason: Error) => void,
  ) {}

  /**
   * The first value of the header named `name` (in lower case), or undefined. Looked up when asked, in the bytes as
   * they came: the engines read two or three headers, and turning every one into strings cost more than that.
   */
  header(name: string): string | undefined {
    const raw = this.rawHeaders;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const candidate = raw[i]!;
      if (candidate.length !== name.length) continue;
      let k = 0;
      // ASCII letters compared without case: 0x20 is the bit that tells them apart.
      while (k < candidate.length && (candidate[k]! | (candidate[k]! >= 0x41 && candidate[k]! <= 0x5a ? 0x20 : 0)) === name.charCodeAt(k))
        k++;
      if (k === candidate.length) return raw[i + 1]!.toString('latin1');
    }
    return undefined;
  }

  /**
   * Hands each piece of the body to `onPiece` as it arrives; resolves at its end, rejects if it breaks off (an error,
   * an abort, a cut connection). A throw from `onPiece` stops reading (the request is aborted) and rejects.
   */
  each(onPiece: (piece: Buffer) => void): Promise<void> {
    if (this.read) return Promise.reject(new Error('the upstream answer was already read'));
    this.read = true;
    return new Promise<void>((resolve, reject) => {
      const held = this.held;
      this.held = [];
      this.heldBytes = 0;
      try {
        // An abort or a failure while the held pieces are handed over ends the reading there.
        for (const piece of held) {
          if (this.failure) break;
          onPiece(piece);
        }
      } catch (err) {
        this.fail(err, reject);
        return;
      }
      if (this.failure) return reject(this.failure);
      if (this.ended) return resolve();
      this.reader = onPiece;
      this.waiter = { resolve, reject };
      const resume = this.resumeUpstream;
      this.resumeUpstream = null;
      resume?.();
    });
  }

  /**
   * Throws the body away: reads it to its end without keeping it, so the connection stays usable; a body longer than
   * DUMPED_AT_MOST is cut off instead (the call is aborted, its connection closed), and the promise rejects.
   */
  dump(): Promise<void> {
    let bytes = 0;
    return this.each((piece) => {
      bytes += piece.length;
      if (bytes > DUMPED_AT_MOST) throw new Error(`the upstream's answer was thrown away after ${DUMPED_AT_MOST} bytes`);
    });
  }

  /** Stops reading: the request is aborted, and a reader waiting for the end is told so. */
  destroy(reason: Error = new Error('the upstream answer was cut off before its end')): void {
    if (this.ended || this.failure) return;
    this.abort(reason);
  }

  private fail(err: unknown, reject: (err: Error) => void): void {
    const error = err instanceof Error ? err : new Error(String(err));
    this.reader = null;
    this.waiter = null;
    this.failure ??= error;
    this.abort(error);
    reject(error);
  }

  /** From the dispatch handler: the next piece of the body. false pauses the upstream. */
  piece(chunk: Buffer, resume: () => void): boolean {
    if (this.failure) return true;
    const reader = this.reader;
    if (reader) {
      try {
        reader(chunk);
      } catch (err) {
        // The reader may have aborted the call before it threw: then it has been told already.
        const waiter = this.waiter;
        if (waiter) this.fail(err, waiter.reject);
      }
      return true;
    }
    this.held.push(chunk);
    this.heldBytes += chunk.length;
    if (this.heldBytes < HELD_BEFORE_READER) return true;
    this.resumeUpstream = resume;
    return false;
  }

  /** From the dispatch handler: the body is complete. */
  end(): void {
    if (this.failure) return;
    this.ended = true;
    const waiter = this.waiter;
    this.reader = null;
    this.waiter = null;
    waiter?.resolve();
  }

  /** From the dispatch handler: the body broke off. */
  error(err: Error): void {
    if (this.ended || this.failure) return;
    this.failure = err;
    this.held = [];
    const waiter = this.waiter;
    this.reader = null;
    this.waiter = null;
    waiter?.reject(err);
  }
}

const aborted = (signal: AbortSignal): Error => {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new Error('the upstream call was aborted');
};

/**
 * Sends `options` through `dispatcher` (a pool): resolves with the response once its headers arrive, rejects if none
 * does (an error, or `signal` aborting first, with the signal's reason). Once the headers have come, an abort breaks
 * off the body instead: its reader is rejected.
 */
export function dispatch(
  dispatcher: Dispatcher,
  options: Dispatcher.DispatchOptions,
  signal: AbortSignal | undefined,
): Promise<UpstreamResponse> {
  if (signal?.aborted) return Promise.reject(aborted(signal));
  return new Promise<UpstreamResponse>((resolve, reject) => {
    let response: UpstreamResponse | null = null;
    let abortRequest: ((reason: Error) => void) | null = null;
    /** An abort asked for before undici could take it (before the connection): applied when it can. */
    let pendingAbort: Error | null = null;
    let done = false;
    const abort = (reason: Error) => {
      if (abortRequest) abortRequest(reason);
      else pendingAbort ??= reason;
    };
    const onSignal = () => abort(aborted(signal!));
    const finish = () => {
      done = true;
      signal?.removeEventListener('abort', onSignal);
    };
    signal?.addEventListener('abort', onSignal, { once: true });
    let resume: () => void = () => {};
    // undici's own handler interface (the one its request() uses): no adapter between it and the connection.
    const handler: Dispatcher.DispatchHandler = {
      onConnect(undiciAbort) {
        abortRequest = (reason) => undiciAbort(reason);
        if (pendingAbort) undiciAbort(pendingAbort);
      },
      onHeaders(statusCode, rawHeaders, resumeUpstream) {
        // Informational answers (100 Continue) are not the response.
        if (statusCode < 200) return true;
        resume = resumeUpstream;
        response = new UpstreamResponse(statusCode, rawHeaders, abort);
        resolve(response);
        return true;
      },
      onData(chunk) {
        return response ? response.piece(chunk, resume) : true;
      },
      onComplete() {
        finish();
        response?.end();
      },
      onError(err) {
        if (done) return;
        finish();
        if (response) response.error(err);
        else reject(err);
      },
    };
    try {
      dispatcher.dispatch(options, handler);
    } catch (err) {
      // undici reports a refused call through onError; were it ever to throw instead, the listener would go too.
      finish();
      throw err;
    }
  });
}
