export { answerPrompt, type AnswerPrompt } from './answer.js';
export { Bm25Index } from './bm25.js';
export { chunkText, DEFAULT_CHUNKING } from './chunk.js';
export { extractText, ExtractionError, formatOf, type DocumentFormat } from './extract/index.js';
export { DocumentLibrary, LibraryError, type DocumentRecord, type Hit, type LibraryLimits, type SearchResult } from './library.js';
export { languageOf, normalizeForSearch, terms } from './text.js';
export type { Embedder } from './vectors.js';
