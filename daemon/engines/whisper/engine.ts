// whisper.cpp in-process through @fugood/whisper.node (prebuilt binaries in its npm package; any local ggml model).
// Audio arrives as 16 kHz mono s16le windows (speech/decode.ts) and each window is one transcribeData call, so a long
// recording is never held whole; segment times are shifted by the window's start.
//
// What the binding does that this adapter works around (measured on 1.1.3):
//  - stop() returns at once but the native job runs to its end, and its promise then never settles (nor does it
//    after a native error). So every job is raced against the call's abort and a time limit, and after an abort the
//    model's slot is held until the job reports 100% progress (or a grace period passes): releasing it earlier would
//    let a second job run beside the first, which stalls the event loop.
//  - An unknown language code throws from a native callback, uncaught: only codes from LANGUAGES are ever passed.
//  - Without `language` it assumes English; 'auto' detects (one extra encoder pass, on the first window only: the
//    language found there is used for the rest, so a recording is transcribed in one language throughout).
//  - Overlapping jobs on one context stall the event loop: one job per model at a time, others queue (Slots).
import whisper from '@fugood/whisper.node';
import { ApiError } from '../../errors/index.js';
import type { ManifestEntry } from '../../models/index.js';
import type { Transcript, TranscriptSegment, TranscriptWord } from '../../speech/formats.js';
import type { TranscriptionEngine, TranscriptionRequest } from '../index.js';
import { Slots } from '../slots.js';

type Context = Awaited<ReturnType<typeof whisper.initWhisper>>;

export interface WhisperEngineOptions {
  threads: number;
  queue: number;
  gpu: boolean;
  /** The longest one window may take before the call fails (a job that never settles must not hold a call forever). */
  windowTimeoutMs: number;
}

/** Languages a caller may name; whisper.cpp's codes (a code it does not know crashes the binding). */
export const LANGUAGES = new Set(['ar', 'en']);

const ABORT_GRACE_MS = 60_000;

interface Host {
  context: Context;
  slots: Slots;
}

export class WhisperEngine implements TranscriptionEngine {
  private readonly hosts = new Map<string, Host>();

  constructor(private readonly options: WhisperEngineOptions) {}

  async load(entry: ManifestEntry, path: string): Promise<void> {
    const context = await whisper.initWhisper({ filePath: path, useGpu: this.options.gpu });
    this.hosts.set(entry.id, { context, slots: new Slots(1, this.options.queue, `The model '${entry.id}'`) });
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
    const release = await host.slots.acquire(signal);
    let releaseLater = false;
    try {
      let language = request.language;
      let offset = 0;
      const segments: TranscriptSegment[] = [];
      const words: TranscriptWord[] = [];
      for await (const window of windows) {
        signal.throwIfAborted();
        let finished = false;
        const job = host.context.transcribeData(window, {
          language: language ?? 'auto',
          temperature: request.temperature ?? 0,
          // Fallback to higher temperatures re-runs a window up to five times; a caller asking for a temperature
          // gets that one.
          temperatureInc: 0,
          maxThreads: this.options.threads,
          ...(request.prompt ? { prompt: request.prompt } : {}),
          ...(request.words ? { maxLen: 1, tokenTimestamps: true } : {}),
          onProgress: (p: number) => {
            if (p >= 100) finished = true;
          },
        });
        let result;
        try {
          result = await settle(job.promise, signal, this.options.windowTimeoutMs);
        } catch (err) {
          void job.stop();
          if (!finished) {
            // The native job goes on: keep the model's slot until it is done.
            releaseLater = true;
            holdUntil(() => finished, ABORT_GRACE_MS, release);
          }
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

  async dispose(): Promise<void> {
    for (const host of this.hosts.values()) await host.context.release();
    this.hosts.clear();
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

function holdUntil(done: () => boolean, graceMs: number, release: () => void): void {
  const started = Date.now();
  const timer = setInterval(() => {
    if (done() || Date.now() - started > graceMs) {
      clearInterval(timer);
      release();
    }
  }, 50);
  timer.unref();
}

function normalizeLanguage(language: string | undefined): string | null {
  if (!language) return null;
  const code = language.toLowerCase();
  return code === 'english' ? 'en' : code === 'arabic' ? 'ar' : code;
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
