export { AudioError, decodeWindows, SAMPLE_RATE, type DecodeOptions } from './decode.js';
export {
  RESPONSE_FORMATS,
  toSrt,
  toVerboseJson,
  toVtt,
  transcriptText,
  type ResponseFormat,
  type Transcript,
  type TranscriptSegment,
  type TranscriptWord,
} from './formats.js';
export { LANGUAGE_NAMES, languageCode, languageName } from './languages.js';
