export { UpstreamClient, type UpstreamTarget } from './client.js';
export { UpstreamChatEngine, upstreamChatBody, type UpstreamRoute } from './chat.js';
export { SseReader } from './sse.js';
