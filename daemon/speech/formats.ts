// A transcript in each of OpenAI's response formats: json ({text}), text, srt, vtt and verbose_json (segments with
// their times, the language, the duration). Times come from the engine in seconds.
import { languageName } from './languages.js';

export interface TranscriptSegment {
  /** Seconds from the start of the audio. */
  start: number;
  end: number;
  text: string;
  /** Token ids of the segment, when the engine reports them. */
  tokens?: number[];
  avgLogprob?: number;
  noSpeechProb?: number;
}

export interface TranscriptWord {
  word: string;
  start: number;
  end: number;
}

export interface Transcript {
  /** ISO 639-1 code, as detected or as asked for. */
  language: string;
  /** Seconds of audio. */
  duration: number;
  segments: TranscriptSegment[];
  words?: TranscriptWord[];
  temperature: number;
}

export const RESPONSE_FORMATS = ['json', 'text', 'srt', 'verbose_json', 'vtt'] as const;
export type ResponseFormat = (typeof RESPONSE_FORMATS)[number];

export function transcriptText(t: Transcript): string {
  return t.segments
    .map((s) => s.text.trim())
    .filter(Boolean)
    .join(' ');
}

/** 3725.5 → "01:02:05,500" (SubRip) or "01:02:05.500" (WebVTT). */
function clock(seconds: number, separator: ',' | '.'): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const pad = (n: number, width = 2) => String(n).padStart(width, '0');
  return `${pad(Math.floor(ms / 3_600_000))}:${pad(Math.floor(ms / 60_000) % 60)}:${pad(Math.floor(ms / 1000) % 60)}${separator}${pad(ms % 1000, 3)}`;
}

/** Cue text must not end a cue early: a blank line inside it would. */
const cueText = (text: string) => text.trim().replace(/\n\s*\n/g, '\n');

export function toSrt(t: Transcript): string {
  return t.segments.map((s, i) => `${i + 1}\n${clock(s.start, ',')} --> ${clock(s.end, ',')}\n${cueText(s.text)}\n`).join('\n');
}

export function toVtt(t: Transcript): string {
  // "-->" in a cue's text would be read as timing.
  const cues = t.segments.map((s) => `${clock(s.start, '.')} --> ${clock(s.end, '.')}\n${cueText(s.text).replaceAll('-->', '->')}\n`);
  return `WEBVTT\n\n${cues.join('\n')}`;
}

export function toVerboseJson(t: Transcript, granularities: ReadonlySet<string>) {
  return {
    task: 'transcribe',
    // OpenAI names the language by its English name here, while requests name it by its code.
    language: languageName(t.language),
    duration: Math.round(t.duration * 100) / 100,
    text: transcriptText(t),
    ...(granularities.has('segment')
      ? {
          segments: t.segments.map((s, id) => ({
            id,
            seek: 0,
            start: round(s.start),
            end: round(s.end),
            text: s.text,
            tokens: s.tokens ?? [],
            temperature: t.temperature,
            avg_logprob: s.avgLogprob ?? 0,
            compression_ratio: 0,
            no_speech_prob: s.noSpeechProb ?? 0,
          })),
        }
      : {}),
    ...(granularities.has('word') && t.words
      ? { words: t.words.map((w) => ({ word: w.word, start: round(w.start), end: round(w.end) })) }
      : {}),
  };
}

const round = (s: number) => Math.round(s * 1000) / 1000;
