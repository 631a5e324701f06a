// Speech to text through an OpenAI-compatible upstream (a whisper server, or another Sovereign daemon). The daemon has
// already decoded the upload with ffmpeg into 16 kHz mono windows (so the upstream gets plain PCM in a WAV, whatever
// container the client sent, and the same length limits hold); it sends them as one file, with the language, the
// scrubbed prompt and the temperature, and asks for verbose_json so segment times come back.
import type { FastifyBaseLogger } from 'fastify';
import { FormData } from 'undici';
import type { Transcript, TranscriptSegment, TranscriptWord } from '../../speech/formats.js';
import { languageCode } from '../../speech/languages.js';
import type { QueueState, TranscriptionEngine, TranscriptionRequest } from '../types.js';
import { CallsInFlight, closeClients, routeOf } from './calls.js';
import type { UpstreamClient } from './client.js';
import { readJson } from './body.js';
import { callUpstream, type FailedCall } from './errors.js';

export interface UpstreamTranscriptionRoute {
  client: UpstreamClient;
  upstreamModel: string;
}

const SAMPLE_RATE = 16_000;

/** A RIFF/WAVE header for 16-bit mono PCM at 16 kHz, followed by the samples. */
function wav(pcm: Buffer[]): Buffer {
  const length = pcm.reduce((n, b) => n + b.length, 0);
  const header = Buffer.alloc(44);
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(36 + length, 4);
  header.write('WAVEfmt ', 8, 'ascii');
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(SAMPLE_RATE, 24);
  header.writeUInt32LE(SAMPLE_RATE * 2, 28);
  header.writeUInt16LE(2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(length, 40);
  return Buffer.concat([header, ...pcm]);
}

interface VerboseTranscript {
  text?: unknown;
  language?: unknown;
  duration?: unknown;
  segments?: Array<{ start?: unknown; end?: unknown; text?: unknown; tokens?: unknown; avg_logprob?: unknown; no_speech_prob?: unknown }>;
  words?: Array<{ word?: unknown; start?: unknown; end?: unknown }>;
}

const num = (v: unknown, fallback: number): number => (typeof v === 'number' && Number.isFinite(v) ? v : fallback);

function transcriptOf(body: VerboseTranscript, request: TranscriptionRequest, seconds: number): Transcript {
  if (typeof body.text !== 'string') throw new Error('the upstream’s transcript has no text');
  const language = typeof body.language === 'string' ? (languageCode(body.language) ?? body.language) : request.language;
  const duration = num(body.duration, seconds);
  // A server that sends only the text gets one segment spanning the audio.
  const segments: TranscriptSegment[] = Array.isArray(body.segments)
    ? body.segments.map((s) => ({
        start: num(s.start, 0),
        end: num(s.end, duration),
        text: typeof s.text === 'string' ? s.text : '',
        ...(Array.isArray(s.tokens) && s.tokens.every((t) => typeof t === 'number') ? { tokens: s.tokens } : {}),
        ...(typeof s.avg_logprob === 'number' ? { avgLogprob: s.avg_logprob } : {}),
        ...(typeof s.no_speech_prob === 'number' ? { noSpeechProb: s.no_speech_prob } : {}),
      }))
    : [{ start: 0, end: duration, text: body.text }];
  const words: TranscriptWord[] | undefined =
    request.words && Array.isArray(body.words)
      ? body.words.map((w) => ({ word: typeof w.word === 'string' ? w.word : '', start: num(w.start, 0), end: num(w.end, 0) }))
      : undefined;
  return { language: language ?? 'en', duration, segments, ...(words ? { words } : {}), temperature: request.temperature ?? 0 };
}

export class UpstreamTranscriptionEngine implements TranscriptionEngine {
  private readonly calls: CallsInFlight;

  constructor(
    private readonly routes: ReadonlyMap<string, UpstreamTranscriptionRoute>,
    private readonly log: FastifyBaseLogger,
  ) {
    this.calls = new CallsInFlight(routes);
  }

  async transcribe(
    modelId: string,
    windows: AsyncIterable<ArrayBuffer>,
    request: TranscriptionRequest,
    signal: AbortSignal,
  ): Promise<Transcript> {
    const route = routeOf(this.routes, modelId);
    const pcm: Buffer[] = [];
    for await (const window of windows) pcm.push(Buffer.from(window));
    const audio = wav(pcm);
    const seconds = (audio.length - 44) / 2 / SAMPLE_RATE;
    const form = () => {
      const data = new FormData();
      data.set('file', new Blob([audio], { type: 'audio/wav' }), 'audio.wav');
      data.set('model', route.upstreamModel);
      data.set('response_format', 'verbose_json');
      data.append('timestamp_granularities[]', 'segment');
      if (request.words) data.append('timestamp_granularities[]', 'word');
      if (request.language) data.set('language', request.language);
      if (request.prompt) data.set('prompt', request.prompt);
      if (request.temperature !== undefined) data.set('temperature', String(request.temperature));
      return data;
    };
    const call: FailedCall = { client: route.client, upstreamModel: route.upstreamModel, modelId, log: this.log };
    return this.calls.track(
      modelId,
      () =>
        callUpstream(
          call,
          signal,
          () => route.client.postForm('/audio/transcriptions', form, signal),
          async (response) => transcriptOf(await readJson<VerboseTranscript>(response, 16 * 1024 * 1024), request, seconds),
        ),
      { signal, ticket: request.ticket },
    );
  }

  queueState(modelId: string): QueueState | undefined {
    return this.calls.queueState(modelId);
  }

  close(): Promise<void> {
    return closeClients(this.routes);
  }
}
