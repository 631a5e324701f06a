// The engines' shared vocabulary: what a call hands an engine and gets back, and the interface of each engine kind
// (llama.cpp, whisper.cpp, OpenAI-compatible upstreams). Every call takes an AbortSignal: a client that goes away
// stops the work it started. Types only: every module of engines/ may import this one, and it imports none of them.
import type { Transcript } from '../speech/formats.js';

export interface ChatMessage {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  content: string;
  name?: string;
  toolCallId?: string;
  toolCalls?: ToolCall[];
}

export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface ToolDefinition {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
}

export interface ChatRequest {
  messages: ChatMessage[];
  temperature?: number;
  topP?: number;
  maxTokens?: number;
  stop?: string[];
  seed?: number;
  responseFormat?: { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; schema: Record<string, unknown> };
  tools?: ToolDefinition[];
  toolChoice?: 'none' | 'auto' | 'required' | { name: string };
}

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

export interface ChatResult {
  content: string;
  toolCalls: ToolCall[];
  finishReason: 'stop' | 'length' | 'tool_calls' | 'content_filter';
  usage: Usage;
}

/** A plain text completion (OpenAI's legacy /v1/completions): the model continues `prompt`. */
export interface CompletionRequest {
  prompt: string;
  /** Text that comes after the completion: fill-in-the-middle, for models that declare FIM tokens. */
  suffix?: string;
  maxTokens: number;
  temperature?: number;
  topP?: number;
  stop?: string[];
  seed?: number;
}

export interface CompletionResult {
  text: string;
  finishReason: 'stop' | 'length';
  usage: Usage;
}

/** OpenAI's service tiers: `priority` and `default` are interactive, `flex` work may wait (batches run at it). */
export type ServiceTier = 'priority' | 'default' | 'flex';

/** How a model's waiting calls are ordered (slots.ts): fair across projects, or in arrival order. */
export type SchedulingPolicy = 'fair' | 'fifo';

/** Who a call is for and how urgent it is: what a model's scheduler orders waiting calls by. */
export interface CallTicket {
  /** The project the call counts for. */
  project: string;
  /** The project's weight: its share of a model's time against other projects' (1 unless configured). */
  weight: number;
  tier: ServiceTier;
  /** Set when the call gets its slot: how long it waited for it, in milliseconds. */
  waitedMs?: number;
}

export interface ChatCallOptions {
  /** Receives each piece of content as it is produced (for streaming). */
  onText: (text: string) => void;
  /** Aborts the work when the client goes away (or, streamed, when the answer cannot be scrubbed). */
  signal: AbortSignal;
  /** The client asked for a stream: an engine that can answer either way (an upstream) picks the matching one. */
  stream?: boolean;
  /** Receives the tokens used when the call ends, whether it finished, failed or was aborted. */
  onUsage?: (usage: Usage) => void;
  /** Who the call is for and its tier, for the model's scheduler; absent, the call is anonymous and `default`. */
  ticket?: CallTicket;
  /**
   * Called once the call holds its place and its input has been checked, just before generation. Until then the call
   * may still be refused (queue full, bad input), so a streamed response must not commit to a 200 before it.
   */
  onStart?: () => void;
}

/** Calls running and waiting for one model: what health reports as its load. */
export interface QueueState {
  busy: number;
  waiting: number;
  /** The waiting calls by service tier, where the engine queues (upstreams queue on their own side). */
  byTier?: { priority: number; default: number; flex: number };
}

/**
 * What every engine kind shares. An engine serves one or more models (by our model id) and is stopped one way: close().
 */
export interface Engine {
  /** Calls running and waiting for `modelId`, or undefined when this engine does not serve it. */
  queueState?(modelId: string): QueueState | undefined;
  /**
   * Stops the engine for good: frees what it holds (weights, contexts, connections); a call after it is refused.
   * MUST be safe to call more than once: the registry that routes to an engine and the runtime that made it may both
   * stop it.
   */
  close(): Promise<void>;
}

export interface ChatEngine extends Engine {
  chat(modelId: string, request: ChatRequest, options: ChatCallOptions): Promise<ChatResult>;
  /**
   * Continues a text (no chat template). A `suffix` the model cannot fill in before (it declares no FIM tokens) is
   * the client's 400.
   */
  complete(modelId: string, request: CompletionRequest, options: ChatCallOptions): Promise<CompletionResult>;
}

export interface EmbeddingResult {
  vectors: Float32Array[];
  promptTokens: number;
}

export interface EmbedOptions {
  /** Embed only the first tokens of an input longer than the model takes, instead of refusing it. */
  truncate?: boolean;
  /** Who the call is for and its tier, for the model's scheduler. */
  ticket?: CallTicket;
}

export interface EmbeddingEngine extends Engine {
  embed(modelId: string, inputs: Array<string | number[]>, signal: AbortSignal, options?: EmbedOptions): Promise<EmbeddingResult>;
  /** Output width of the model, and whether `dimensions` may shorten it. */
  dimensions(modelId: string): { size: number; shortenable: boolean };
  /**
   * The text a token array stands for, in the model's own vocabulary, so that it can be scrubbed like text; absent
   * where the engine does not know the vocabulary (an upstream's).
   */
  detokenize?(modelId: string, tokens: number[]): string;
}

export interface TranscriptionRequest {
  /** 'ar', 'en', or null to detect. */
  language: string | null;
  prompt?: string;
  temperature?: number;
  /** Word timings asked for (timestamp_granularities includes "word"). */
  words: boolean;
  /** Who the call is for and its tier, for the model's scheduler. */
  ticket?: CallTicket;
}

export interface TranscriptionEngine extends Engine {
  /** Transcribes 16 kHz mono s16le windows, in order, into one transcript. */
  transcribe(modelId: string, windows: AsyncIterable<ArrayBuffer>, request: TranscriptionRequest, signal: AbortSignal): Promise<Transcript>;
}

export interface ImageRequest {
  /** Already scrubbed. */
  prompt: string;
  n: number;
  /** "WIDTHxHEIGHT" as the client asked, or null to let the engine choose ("auto"). */
  size: string | null;
  quality?: string;
  style?: string;
  background?: string;
}

export interface ImageResult {
  /** The engine's images as it made them (any format sharp reads); the route normalises them. */
  images: Buffer[];
  /** Prompt tokens, when the engine reports them. */
  promptTokens: number | null;
  /** Generated (image) tokens, when the engine reports them. */
  completionTokens: number | null;
  /** The prompt as the engine rewrote it, per image, when it did (OpenAI's revised_prompt); not scrubbed yet. */
  revisedPrompts: Array<string | null>;
}

export interface ImageEngine extends Engine {
  generate(modelId: string, request: ImageRequest, signal: AbortSignal): Promise<ImageResult>;
}

/** The engine interface that serves each capability (`Capability`: the manifest's and the catalog's names). */
export interface EngineOf {
  chat: ChatEngine;
  embeddings: EmbeddingEngine;
  transcription: TranscriptionEngine;
  image: ImageEngine;
}
