// How an engine hears that its call must stop (the caller went away, or the answer could not be scrubbed): an
// 'abort' event, once, after which `aborted` and `reason` say so. An EventEmitter rather than an AbortSignal because
// every call has one and Node 20 takes about 4 µs to make an AbortController, more than an EventEmitter by fifty
// times; undici takes an EventEmitter as a request's signal. `signal` makes a real AbortSignal, linked, on first use,
// for the APIs that need one (node-llama-cpp, timers).
import { EventEmitter } from 'node:events';
import type { ChatCallOptions, Usage } from './index.js';

export class StopSignal extends EventEmitter {
  aborted = false;
  reason: unknown = undefined;
  private linked: AbortController | null = null;

  /** Stops the call, once: 'abort' listeners run, and `signal` is aborted with the same reason. */
  abort(reason: unknown = new Error('aborted')): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.linked?.abort(reason);
    try {
      this.emit('abort');
    } catch (err) {
      // As an AbortSignal reports a listener that throws: as an uncaught exception, after the caller of abort() (one
      // of the end-of-call callbacks, which must all run) has carried on.
      process.nextTick(() => {
        throw err;
      });
    }
  }

  /** An AbortSignal that aborts with this one (already aborted if this one is). */
  get signal(): AbortSignal {
    if (!this.linked) {
      this.linked = new AbortController();
      if (this.aborted) this.linked.abort(this.reason);
    }
    return this.linked.signal;
  }
}

/** Either kind of stop signal: what code that only reads `aborted` and `reason` (and hands it to undici) accepts. */
export type AnyStopSignal = AbortSignal | StopSignal;

/** An AbortSignal for `stop`, for the APIs that need a real one. */
export function abortSignalOf(stop: AnyStopSignal): AbortSignal {
  return stop instanceof StopSignal ? stop.signal : stop;
}

/**
 * A chat call's options whose `signal` is made from `stop` only if the engine reads it.
 *
 * A class so that `signal` is a getter on the prototype. The object literal this replaces, `{ …, get signal() {…} }`
 * made per call, cost far more than the AbortController it saved: on Node 20, V8 keeps what such a getter reaches
 * alive through every young-generation collection until the next full one. Each call (request, body, answer,
 * logger) was copied to the old generation whole: about 1.6 MB a minor GC, pauses of 4-7 ms, at any rate
 * (bench/gateway/NOTES.md, "A chat call's engine options carry no getter of their own").
 */
export class StopCallOptions implements ChatCallOptions {
  readonly stop: StopSignal;
  readonly onText: (text: string) => void;
  readonly onUsage?: (usage: Usage) => void;
  readonly onStart?: () => void;
  readonly stream?: boolean;

  constructor(options: Omit<ChatCallOptions, 'signal' | 'stop'> & { stop: StopSignal }) {
    this.stop = options.stop;
    this.onText = options.onText;
    this.onUsage = options.onUsage;
    this.onStart = options.onStart;
    this.stream = options.stream;
  }

  get signal(): AbortSignal {
    return this.stop.signal;
  }
}
