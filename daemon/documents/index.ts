export { Bm25Index } from './bm25.js';
export { chunkText, DEFAULT_CHUNKING } from './chunk.js';
export { DocumentLibrary, LibraryError, type DocumentRecord, type Hit, type LibraryLimits } from './library.js';
export { languageOf, normalizeForSearch, terms } from './text.js';
