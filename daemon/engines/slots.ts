// A model serves `parallel` calls at once and lets at most `queue` more wait; past that a call is refused at
// once with 503 and Retry-After rather than queued without bound (Tessera's back-pressure, as one named error).
import { ApiError } from '../errors/index.js';

export class Slots {
  private busy = 0;
  private readonly waiting: Array<{ grant: () => void; signal: AbortSignal; onAbort: () => void }> = [];

  constructor(
    private readonly parallel: number,
    private readonly queue: number,
    private readonly label: string,
    /** What a refused call is told to wait, in seconds. */
    private readonly retryAfterSeconds = 1,
  ) {}

  /** Resolves with a release function once a slot is free; rejects if the queue is full or the caller aborts. */
  acquire(signal: AbortSignal): Promise<() => void> {
    if (signal.aborted) return Promise.reject(signal.reason as Error);
    if (this.busy < this.parallel) {
      this.busy++;
      return Promise.resolve(this.releaser());
    }
    if (this.waiting.length >= this.queue) {
      return Promise.reject(
        new ApiError(
          'server_overloaded',
          `${this.label} is busy with ${this.busy} calls and ${this.waiting.length} waiting. Retry after the number of seconds in Retry-After.`,
          {
            headers: { 'retry-after': String(this.retryAfterSeconds) },
          },
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const entry = {
        signal,
        grant: () => {
          signal.removeEventListener('abort', entry.onAbort);
          resolve(this.releaser());
        },
        onAbort: () => {
          const i = this.waiting.indexOf(entry);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(signal.reason as Error);
        },
      };
      signal.addEventListener('abort', entry.onAbort, { once: true });
      this.waiting.push(entry);
    });
  }

  get state(): { busy: number; waiting: number } {
    return { busy: this.busy, waiting: this.waiting.length };
  }

  private releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.shift();
      if (next) next.grant();
      else this.busy--;
    };
  }
}
