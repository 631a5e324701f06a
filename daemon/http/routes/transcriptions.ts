// POST /v1/audio/transcriptions: OpenAI's multipart shape (file, model, language, prompt, temperature,
// response_format, timestamp_granularities[]). The audio is decoded by ffmpeg into 16 kHz windows (speech/decode.ts)
// that the engine transcribes one after another; the prompt is scrubbed like any text a model sees, and so is the
// transcript unless scrub.output is off (a recording can speak an ID aloud).
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { EngineRegistry } from '../../engines/index.js';
import type { ModelCatalog } from '../../models/index.js';
import type { Config } from '../../config/index.js';
import { ApiError } from '../../errors/index.js';
import { noRedactions, type RedactionCounts, type ScrubSession } from '../../scrub/index.js';
import {
  AudioError,
  decodeWindows,
  RESPONSE_FORMATS,
  toSrt,
  toVerboseJson,
  toVtt,
  transcriptText,
  type ResponseFormat,
  type Transcript,
} from '../../speech/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { abortOnDisconnect } from '../lifetime.js';
import { acceptUploads, readParts, type Parts } from '../multipart.js';
import { noteWait, ticketFor, type TicketDeps } from '../tickets.js';
import { scrubRequest } from '../stages/scrub.js';

/** What the transcription route needs. */
export interface TranscriptionRouteDeps extends TicketDeps {
  config: Config;
  catalog: ModelCatalog;
  engines: EngineRegistry;
}

const FIELDS = ['model', 'language', 'prompt', 'temperature', 'response_format', 'timestamp_granularities[]', 'timestamp_granularities'];
const LANGUAGES = new Set(['ar', 'en']);
const WINDOW_SECONDS = 30;
const AUDIO_EXTENSIONS = /\.(wav|wave|mp3|mpga|mpeg|ogg|oga|opus|webm|m4a|mp4|aac|flac)$/i;

function invalid(message: string, param: string): ApiError {
  return new ApiError('invalid_request_error', message, { param });
}

export function registerTranscriptionRoute(v1: FastifyInstance, deps: TranscriptionRouteDeps): void {
  const declaration: RouteDeclaration = { auth: true };
  const limit = deps.config.speech.maxUploadBytes;
  void v1.register(async (scope) => {
    await acceptUploads(scope, limit);
    scope.post('/audio/transcriptions', { config: { declaration } }, async (request, reply) => {
      if (!request.isMultipart()) {
        throw new ApiError('unsupported_media_type', 'Send the audio as multipart/form-data with the file in a part named "file".');
      }
      const { fields, file } = await readParts(request, { fields: FIELDS, maxFileBytes: limit, limitKey: 'speech.maxUploadBytes' });
      const model = deps.catalog.resolve(fields.model, 'transcription');
      // The model is named in a multipart field, which the resolve-model stage never sees: the audit entry names it.
      request.call.model = model;
      const engine = deps.engines.get('transcription', model.id);
      if (!engine) throw new ApiError('model_not_ready', `The model '${model.id}' is loading.`, { headers: { 'retry-after': '2' } });

      const { language, format, temperature, granularities } = callOptions(fields, file);
      const body = { prompt: fields.prompt ?? '' };
      await scrubRequest(request, 'transcription', body);

      const ticket = ticketFor(deps, request);
      const signal = abortOnDisconnect(request, reply);
      const windows = decodeWindows(file.bytes, {
        windowSeconds: WINDOW_SECONDS,
        maxSeconds: deps.config.speech.maxSeconds,
        signal,
        ffmpeg: deps.config.speech.ffmpeg,
      });
      let transcript: Transcript;
      try {
        const work = engine.transcribe(
          model.id,
          windows,
          { language, prompt: body.prompt || undefined, temperature, words: granularities.has('word'), ticket },
          signal,
        );
        startedEngineWork(request.call, model, work);
        transcript = await work;
        noteWait(reply, ticket);
      } catch (err) {
        if (err instanceof AudioError) throw invalid(err.message, 'file');
        throw err;
      }
      if (deps.config.scrub.output) {
        const tally = noRedactions();
        transcript = scrubTranscript(transcript, request.call.scrubSession!, tally);
        request.call.outputRedactions = tally;
      }
      request.call.usedTokens = 0;
      return sendTranscript(reply, transcript, format, granularities);
    });
  });
}

/** The call's options from its form fields, checked: a 400 (or 415 for a file that is not audio) names the field. */
function callOptions(fields: Record<string, string | undefined>, file: Parts['file']) {
  const language = fields.language?.trim().toLowerCase() || null;
  if (language !== null && !LANGUAGES.has(language)) {
    throw invalid(`language must be 'ar' or 'en' (or absent to detect it); got '${fields.language}'.`, 'language');
  }
  const format = (fields.response_format ?? 'json') as ResponseFormat;
  if (!RESPONSE_FORMATS.includes(format))
    throw invalid(`response_format must be one of ${RESPONSE_FORMATS.join(', ')}.`, 'response_format');
  let temperature: number | undefined;
  if (fields.temperature !== undefined) {
    temperature = Number(fields.temperature);
    if (!Number.isFinite(temperature) || temperature < 0 || temperature > 1)
      throw invalid('temperature must be a number from 0 to 1.', 'temperature');
  }
  const granularities = new Set(
    (fields['timestamp_granularities[]'] ?? fields.timestamp_granularities ?? 'segment').split(',').map((g) => g.trim()),
  );
  for (const g of granularities) {
    if (g !== 'segment' && g !== 'word')
      throw invalid(`timestamp_granularities takes 'segment' and 'word'; got '${g}'.`, 'timestamp_granularities');
  }
  if (granularities.size && fields['timestamp_granularities[]'] !== undefined && format !== 'verbose_json') {
    throw invalid('timestamp_granularities needs response_format verbose_json.', 'timestamp_granularities');
  }
  if (!file.bytes.length) throw invalid('The audio file is empty.', 'file');
  if (!AUDIO_EXTENSIONS.test(file.filename) && !/^(audio|video)\//.test(file.mimetype)) {
    throw new ApiError(
      'unsupported_media_type',
      `'${file.filename}' (${file.mimetype}) is not audio: send wav, mp3, ogg/opus, webm, m4a or flac.`,
      {
        param: 'file',
      },
    );
  }
  return { language, format, temperature, granularities };
}

/**
 * The transcript with personal data replaced. Segments and words are read joined (the transcript's text joins its
 * segments with a space): a value spoken across two of them is one value.
 */
function scrubTranscript(transcript: Transcript, session: ScrubSession, tally: RedactionCounts): Transcript {
  const segments = session.scrubPieces(
    transcript.segments.map((s) => s.text),
    ' ',
    tally,
  );
  const words =
    transcript.words &&
    session.scrubPieces(
      transcript.words.map((w) => w.word),
      ' ',
    );
  return {
    ...transcript,
    segments: transcript.segments.map((s, i) => ({ ...s, text: segments[i]! })),
    ...(transcript.words && words ? { words: transcript.words.map((w, i) => ({ ...w, word: words[i]! })) } : {}),
  };
}

/** The transcript in the format asked for. */
function sendTranscript(reply: FastifyReply, transcript: Transcript, format: ResponseFormat, granularities: Set<string>) {
  switch (format) {
    case 'text':
      return reply.type('text/plain; charset=utf-8').send(`${transcriptText(transcript)}\n`);
    case 'srt':
      return reply.type('application/x-subrip; charset=utf-8').send(toSrt(transcript));
    case 'vtt':
      return reply.type('text/vtt; charset=utf-8').send(toVtt(transcript));
    case 'verbose_json':
      return toVerboseJson(transcript, granularities);
    default:
      return { text: transcriptText(transcript) };
  }
}
