// whisper.cpp in-process through @fugood/whisper.node (prebuilt binaries in its npm package; any local ggml model).
// Audio arrives as 16 kHz mono s16le windows (speech/decode.ts) and each window is one transcribeData call, so a long
// recording is never held whole; segment times are shifted by the window's start.
//
// What the binding does that this adapter works around (read in its source and measured on 1.1.3):
//  - A job with an onProgress (or onNewSegments) callback can hang forever: when whisper.cpp is done, the worker
//    thread waits on a condition variable for the callbacks still queued to the JS thread, which decrement a counter
//    and notify without taking the mutex, so a notify that lands between the worker's check and its sleep is lost.
//    The job's promise then never settles, the libuv thread and the context's lock stay taken, and even shutdown
//    hangs. Seen under the full test suite's load. So no callback is ever passed.
//  - stop() does not stop whisper.cpp (the binding sets no abort callback); it only turns the finished job into an
//    error, and an error never settles the promise (the completion callback is called with one argument where the
//    binding's own handler wants two). So stop() is never called: a job the caller no longer wants runs to its end
//    while the model's slot stays taken (a second job beside it on one context stalls the event loop), and the
//    slot is given back when its promise settles, or after a grace period for a job that never does.
//  - An unknown language code throws from a native callback, uncaught: only codes from LANGUAGES are ever passed.
//  - Without `language` it assumes English; 'auto' detects (one extra encoder pass, on the first window only: the
//    language found there is used for the rest, so a recording is transcribed in one language throughout).
//  - Overlapping jobs on one context stall the event loop: one job per model at a time, others queue (Slots).
//  - whisper.cpp prints to stderr unless its log callback is routed to JavaScript (native-log.ts).
import whisper from '@fugood/whisper.node';
import { ApiError } from '../../errors/index.js';
import type { ManifestEntry } from '../../models/index.js';
import type { Transcript, TranscriptSegment, TranscriptWord } from '../../speech/formats.js';
import { languageCode } from '../../speech/languages.js';
import type { SchedulingPolicy, TranscriptionEngine, TranscriptionRequest } from '../types.js';
import { Slots } from '../slots.js';
import { routeNativeLog, type NativeLogWriter } from './native-log.js';

type Context = Awaited<ReturnType<typeof whisper.initWhisper>>;

export interface WhisperEngineOptions {
  threads: number;
  queue: number;
  gpu: boolean;
  /** The longest one window may take before the call fails (a job that never settles must not hold a call forever). */
  windowTimeoutMs: number;
  /** Where whisper.cpp's own output goes, a line at a time; without it, to stderr. */
  log?: NativeLogWriter;
  /** How each model's waiting calls are ordered (engines/slots.ts); fair unless said. */
  policy?: SchedulingPolicy;
}

/** Languages a caller may name; whisper.cpp's codes (a code it does not know crashes the binding). */
export const LANGUAGES = new Set(['ar', 'en']);

interface Host {
  context: Context;
  slots: Slots;
}

export class WhisperEngine implements TranscriptionEngine {
  private readonly hosts = new Map<string, Host>();
  private readonly unrouteLog: () => void;

  constructor(private readonly options: WhisperEngineOptions) {
    // Before the first model loads: the binding turns the route on as it loads whisper.cpp.
    this.unrouteLog = options.log ? routeNativeLog(options.log) : () => {};
  }

  async load(entry: ManifestEntry, path: string): Promise<void> {
    const context = await whisper.initWhisper({ filePath: path, useGpu: this.options.gpu });
    this.hosts.set(entry.id, {
      context,
      slots: new Slots({ parallel: 1, queue: this.options.queue, label: `The model '${entry.id}'`, policy: this.options.policy }),
    });
  }

  queueState(modelId: string) {
    return this.hosts.get(modelId)?.slots.state;
  }

  async transcribe(
    modelId: string,
    windows: AsyncIterable<ArrayBuffer>,
    request: TranscriptionRequest,
    signal: AbortSignal,
  ): Promise<Transcript> {
    const host = this.hosts.get(modelId);
    if (!host) throw new ApiError('model_not_ready', `The model '${modelId}' is not loaded.`, { headers: { 'retry-after': '2' } });
    const release = await host.slots.acquire(signal, request.ticket);
    let releaseLater = false;
    try {
      let language = request.language;
      let offset = 0;
      const segments: TranscriptSegment[] = [];
      const words: TranscriptWord[] = [];
      for await (const window of windows) {
        signal.throwIfAborted();
        const started = Date.now();
        const job = host.context.transcribeData(window, {
          language: language ?? 'auto',
          temperature: request.temperature ?? 0,
          // Fallback to higher temperatures re-runs a window up to five times; a caller asking for a temperature
          // gets that one.
          temperatureInc: 0,
          maxThreads: this.options.threads,
          ...(request.prompt ? { prompt: request.prompt } : {}),
          ...(request.words ? { maxLen: 1, tokenTimestamps: true } : {}),
        });
        let result;
        try {
          result = await settle(job.promise, signal, this.options.windowTimeoutMs);
        } catch (err) {
          // The native job goes on (or has just failed): the slot is given back once it has settled, or once the
          // window's time limit has passed since it started (a job that has not settled by then is taken as dead).
          releaseLater = true;
          releaseWhenSettled(job.promise, this.options.windowTimeoutMs - (Date.now() - started), release);
          throw err;
        }
        language ??= normalizeLanguage(result.language);
        for (const s of result.segments) {
          const piece = { start: offset + s.t0 / 1000, end: offset + s.t1 / 1000, text: s.text };
          if (request.words) {
            if (s.text.trim()) words.push({ word: s.text.trim(), start: piece.start, end: piece.end });
          } else segments.push(piece);
        }
        offset += window.byteLength / 2 / 16_000;
      }
      return {
        language: language ?? 'en',
        duration: offset,
        segments: request.words ? segmentsOfWords(words) : segments,
        ...(request.words ? { words } : {}),
        temperature: request.temperature ?? 0,
      };
    } finally {
      if (!releaseLater) release();
    }
  }

  /** Releases every model's context; a call after it gets model_not_ready. */
  async close(): Promise<void> {
    const hosts = [...this.hosts.values()];
    this.hosts.clear();
    for (const host of hosts) await host.context.release();
    this.unrouteLog();
  }
}

function settle<T>(promise: Promise<T>, signal: AbortSignal, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new ApiError('internal_error', `Transcribing a window took longer than ${timeoutMs} ms; the call was stopped.`)),
      timeoutMs,
    );
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    });
  });
}

/** Calls release once the job has settled, or after graceMs (a job whose promise never settles). */
function releaseWhenSettled(job: Promise<unknown>, graceMs: number, release: () => void): void {
  let released = false;
  const once = () => {
    if (released) return;
    released = true;
    clearTimeout(timer);
    release();
  };
  const timer = setTimeout(once, Math.max(0, graceMs));
  timer.unref();
  job.then(once, once);
}

function normalizeLanguage(language: string | undefined): string | null {
  if (!language) return null;
  return languageCode(language) ?? language.toLowerCase();
}

/** Word timings grouped into segments that end at sentence marks (or every 30 words). */
function segmentsOfWords(words: TranscriptWord[]): TranscriptSegment[] {
  const out: TranscriptSegment[] = [];
  let current: TranscriptWord[] = [];
  for (const w of words) {
    current.push(w);
    if (/[.!?؟]$/.test(w.word) || current.length >= 30) {
      out.push({ start: current[0]!.start, end: w.end, text: ` ${current.map((c) => c.word).join(' ')}` });
      current = [];
    }
  }
  if (current.length) out.push({ start: current[0]!.start, end: current.at(-1)!.end, text: ` ${current.map((c) => c.word).join(' ')}` });
  return out;
}
