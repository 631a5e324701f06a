export { UpstreamClient, type UpstreamTarget } from './client.js';
export { UpstreamChatEngine, upstreamChatBody, type UpstreamRoute } from './chat.js';
export { UpstreamEmbeddingEngine, type UpstreamEmbeddingRoute } from './embeddings.js';
export { UpstreamTranscriptionEngine } from './transcription.js';
export { UpstreamMonitor, type UpstreamStatus } from './monitor.js';
export { SseReader } from './sse.js';
export { UpstreamImageEngine, type UpstreamImageRoute } from './images.js';
