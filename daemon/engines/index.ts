// The engines' public surface: the vocabulary of a call and of each engine kind, and the registry that routes model
// ids to engines. The engines themselves are imported from their own folders (llama/, whisper/, upstream/): the
// native ones load only when a model needs them. Nothing inside engines/ imports this file.
export type {
  CallTicket,
  ChatCallOptions,
  ChatEngine,
  ChatMessage,
  ChatRequest,
  ChatResult,
  CompletionRequest,
  CompletionResult,
  EmbeddingEngine,
  EmbeddingResult,
  EmbedOptions,
  Engine,
  EngineOf,
  ImageEngine,
  ImageRequest,
  ImageResult,
  QueueState,
  SchedulingPolicy,
  ServiceTier,
  ToolCall,
  ToolDefinition,
  TranscriptionEngine,
  TranscriptionRequest,
  Usage,
} from './types.js';
export { EngineRegistry } from './registry.js';
