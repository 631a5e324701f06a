// llama.cpp through node-llama-cpp: chat and embeddings for the GGUF models the inventory lists. Each chat model
// has one context with `parallel` sequences; each call takes a sequence (waiting in a bounded queue if none is
// free), and gives it back when it ends or its client goes away, so an aborted call frees its KV cache at once.
// Each embeddings model has a pool of `embeddingContexts` contexts that embed the inputs of the calls in progress
// side by side (embedding-pool.ts).
import { randomBytes } from 'node:crypto';
import {
  LlamaChat,
  LlamaCompletion,
  resolveChatWrapper,
  type ChatWrapper,
  type ChatHistoryItem,
  type ChatModelFunctions,
  type GbnfJsonSchema,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaEmbeddingContext,
  type LlamaGrammar,
  type LlamaModel,
  type Token,
} from 'node-llama-cpp';
import { ApiError } from '../../errors/index.js';
import { servingContextOf, type ManifestEntry } from '../../models/index.js';
import type {
  ChatCallOptions,
  ChatEngine,
  ChatRequest,
  ChatResult,
  CompletionRequest,
  CompletionResult,
  EmbeddingEngine,
  EmbeddingResult,
  EmbedOptions,
  SchedulingPolicy,
  ToolCall,
  Usage,
} from '../types.js';
import { Slots } from '../slots.js';
import { EmbeddingPool } from './embedding-pool.js';
import { toHistory } from './history.js';
import { grammarSchema, jsonSchemaGrammar } from './json-schema.js';
import { StopSequences } from './stops.js';

export interface LlamaEngineOptions {
  threads: number;
  parallel: number;
  queue: number;
  gpu: 'auto' | 'off';
  /** How each model's waiting calls are ordered (slots.ts); fair unless said. */
  policy?: SchedulingPolicy;
  /**
   * Contexts each embeddings model embeds on at once (embedding-pool.ts), each with `threads / embeddingContexts`
   * threads, and calls it serves at once. 1 embeds one input at a time on one context with every thread, as the engine
   * did before the pool: the bench's baseline. Default 2.
   */
  embeddingContexts?: number;
}

interface ChatHost {
  kind: 'chat';
  model: LlamaModel;
  context: LlamaContext;
  /** Resolved once from the GGUF's chat template: resolving it per call costs hundreds of milliseconds. */
  chatWrapper: ChatWrapper;
  slots: Slots;
}

interface EmbeddingHost {
  kind: 'embeddings';
  model: LlamaModel;
  context: EmbeddingPool;
  contextSize: number;
  vocabularySize: number;
  slots: Slots;
  shortenable: boolean;
}

type Host = ChatHost | EmbeddingHost;

const newCallId = () => `call_${randomBytes(12).toString('base64url')}`;

function schemaError(param: string, err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  return new ApiError(
    'invalid_request_error',
    `The JSON schema in '${param}' cannot be enforced: ${(err as Error).message}. Use a simpler schema.`,
    { param },
  );
}

export class LlamaEngine implements ChatEngine, EmbeddingEngine {
  private readonly hosts = new Map<string, Host>();

  constructor(
    private readonly llama: Llama,
    private readonly options: LlamaEngineOptions,
  ) {}

  async load(entry: ManifestEntry, path: string): Promise<void> {
    // The weights are read into the daemon's own memory, not mapped: a mapped file's pages are the file's, so bytes
    // written into it after it was verified would reach the weights served (docs/models.md).
    const model = await this.llama.loadModel({ modelPath: path, gpuLayers: this.options.gpu === 'off' ? 0 : 'auto', useMmap: false });
    try {
      const contextSize = servingContextOf(entry);
      const label = `The model '${entry.id}'`;
      if (entry.capability === 'embeddings') {
        const context = await embeddingPool(model, contextSize, this.options);
        this.hosts.set(entry.id, {
          kind: 'embeddings',
          model,
          context,
          contextSize,
          vocabularySize: model.fileInfo.metadata.tokenizer.ggml.tokens.length,
          slots: new Slots({ parallel: context.size, queue: this.options.queue, label, policy: this.options.policy }),
          shortenable: entry.dimensionsShortenable ?? false,
        });
      } else {
        // Under the fair policy one sequence more than `parallel`, for a project that holds none (slots.ts).
        const guests = (this.options.policy ?? 'fair') === 'fair' ? 1 : 0;
        const context = await model.createContext({
          contextSize,
          sequences: this.options.parallel + guests,
          threads: this.options.threads,
        });
        this.hosts.set(entry.id, {
          kind: 'chat',
          model,
          context,
          chatWrapper: resolveChatWrapper(model),
          slots: new Slots({ parallel: this.options.parallel, guests, queue: this.options.queue, label, policy: this.options.policy }),
        });
      }
    } catch (err) {
      await model.dispose();
      throw err;
    }
  }

  /** Frees every model's context and weights; a call after it gets model_not_ready. */
  async close(): Promise<void> {
    const hosts = [...this.hosts.values()];
    this.hosts.clear();
    for (const host of hosts) {
      await host.context.dispose();
      await host.model.dispose();
    }
  }

  private host<K extends Host['kind']>(modelId: string, kind: K): Extract<Host, { kind: K }> {
    const host = this.hosts.get(modelId);
    if (!host || host.kind !== kind) {
      throw new ApiError('model_not_ready', `The model '${modelId}' is not loaded. Retry shortly.`, { headers: { 'retry-after': '2' } });
    }
    return host as Extract<Host, { kind: K }>;
  }

  async chat(modelId: string, request: ChatRequest, options: ChatCallOptions): Promise<ChatResult> {
    const { onText, signal, onStart } = options;
    const host = this.host(modelId, 'chat');
    return this.onSequence(host, options, async (sequence) => {
      const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: host.chatWrapper, autoDisposeSequence: false });
      try {
        const history = toHistory(request.messages);
        const forcedTool =
          request.tools?.length && request.toolChoice !== undefined && request.toolChoice !== 'none' && request.toolChoice !== 'auto';
        const autoTools = request.tools?.length && (request.toolChoice === undefined || request.toolChoice === 'auto');
        const functions = autoTools ? await this.functionsOf(request) : undefined;
        const room = roomAfter(host, this.countPromptUpperBound(host, chat, request, history, functions), 'messages');
        const toolGrammar = forcedTool ? await this.toolGrammar(request) : undefined;
        const grammar = toolGrammar ?? (await this.formatGrammar(request));
        // Everything the request could be refused for has been checked: from here on the call runs.
        onStart?.();
        const stopping = stopSequences(request.stop, onText, signal);
        const response = await chat.generateResponse(history, {
          signal: stopping.signal,
          stopOnAbortSignal: stopping.stops !== null,
          maxTokens: Math.min(request.maxTokens ?? room, room),
          // OpenAI's defaults (node-llama-cpp's own default is greedy decoding).
          temperature: request.temperature ?? 1,
          topP: request.topP ?? 1,
          ...(request.seed !== undefined ? { seed: request.seed } : {}),
          ...(grammar ? { grammar } : functions ? { functions, documentFunctionParams: true } : {}),
          onResponseChunk(chunk) {
            // A forced tool call is not content: it is returned as tool_calls at the end.
            if (chunk.type === undefined && !forcedTool && chunk.text) stopping.onText(chunk.text);
          },
        });
        return resultOf(stopping.settle(response), usageOf(sequence), toolGrammar);
      } finally {
        chat.dispose();
      }
    });
  }

  async complete(modelId: string, request: CompletionRequest, options: ChatCallOptions): Promise<CompletionResult> {
    const { onText, signal, onStart } = options;
    const host = this.host(modelId, 'chat');
    return this.onSequence(host, options, async (sequence) => {
      const completion = new LlamaCompletion({ contextSequence: sequence });
      try {
        if (request.suffix !== undefined && !completion.infillSupported) {
          throw new ApiError(
            'invalid_request_error',
            `The model '${modelId}' declares no fill-in-the-middle tokens, so it cannot complete before a 'suffix'. Leave out 'suffix', or use a code model whose GGUF declares them.`,
            { param: 'suffix' },
          );
        }
        const promptTokens =
          host.model.tokenize(request.prompt).length + (request.suffix !== undefined ? host.model.tokenize(request.suffix).length + 3 : 1);
        const room = roomAfter(host, promptTokens, 'prompt');
        onStart?.();
        const stopping = stopSequences(request.stop, onText, signal);
        const generation = {
          signal: stopping.signal,
          stopOnAbortSignal: stopping.stops !== null,
          maxTokens: Math.min(request.maxTokens, room),
          temperature: request.temperature ?? 1,
          topP: request.topP ?? 1,
          ...(request.seed !== undefined ? { seed: request.seed } : {}),
          onTextChunk: (text: string) => {
            if (text) stopping.onText(text);
          },
        };
        const response = stopping.settle(
          request.suffix !== undefined
            ? await completion.generateInfillCompletionWithMeta(request.prompt, request.suffix, generation)
            : await completion.generateCompletionWithMeta(request.prompt, generation),
        );
        return {
          text: response.response,
          finishReason: response.metadata.stopReason === 'maxTokens' ? 'length' : 'stop',
          usage: usageOf(sequence),
        };
      } finally {
        completion.dispose();
      }
    });
  }

  /**
   * Runs one call on a sequence of the model's context, once a slot is free: the tokens it used are reported and the
   * sequence and the slot given back however it ends, so an aborted call frees its KV cache at once.
   */
  private async onSequence<T>(
    host: ChatHost,
    { signal, onUsage, ticket }: ChatCallOptions,
    run: (sequence: LlamaContextSequence) => Promise<T>,
  ): Promise<T> {
    const release = await host.slots.acquire(signal, ticket);
    let sequence: LlamaContextSequence | undefined;
    try {
      sequence = host.context.getSequence();
      return await run(sequence);
    } finally {
      try {
        if (sequence) onUsage?.(usageOf(sequence));
        await sequence?.dispose();
      } finally {
        release();
      }
    }
  }

  /** tool_choice 'auto': node-llama-cpp's function calling, after checking that every schema can be enforced. */
  private async functionsOf(request: ChatRequest): Promise<ChatModelFunctions> {
    const functions: Record<string, { description?: string; params?: GbnfJsonSchema }> = {};
    for (const [i, t] of request.tools!.entries()) {
      const param = `tools[${i}].function.parameters`;
      if (t.parameters) await this.jsonSchemaGrammar(t.parameters, param);
      functions[t.name] = {
        ...(t.description ? { description: t.description } : {}),
        ...(t.parameters ? { params: grammarSchema(t.parameters, param) } : {}),
      };
    }
    return functions;
  }

  /**
   * An upper bound on the rendered prompt's tokens, to refuse prompts that cannot fit. Every token is at least one
   * byte, so the UTF-8 bytes of the texts plus a generous allowance per message for the template bound it without
   * rendering anything; only when that bound comes near the context is the template rendered and tokenized.
   */
  private countPromptUpperBound(
    host: ChatHost,
    chat: LlamaChat,
    request: ChatRequest,
    history: ChatHistoryItem[],
    functions: ChatModelFunctions | undefined,
  ): number {
    if (!functions && request.messages.every((m) => !m.toolCalls?.length)) {
      let bytes = 0;
      for (const m of request.messages) bytes += 32 + Buffer.byteLength(m.content);
      if (bytes < host.context.contextSize / 2) return bytes;
    }
    const { contextText } = chat.chatWrapper.generateContextState({
      chatHistory: history,
      ...(functions ? { availableFunctions: functions, documentFunctionParams: true } : {}),
    });
    return contextText.tokenize(host.model.tokenizer).length;
  }

  private async formatGrammar(request: ChatRequest): Promise<LlamaGrammar | undefined> {
    const format = request.responseFormat;
    if (!format || format.type === 'text') return undefined;
    if (format.type === 'json_object') return this.llama.getGrammarFor('json');
    return this.jsonSchemaGrammar(format.schema, 'response_format.json_schema.schema');
  }

  /** Grammars compiled from JSON schemas, by schema text: clients send the same tools and formats again and again. */
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();

  private async jsonSchemaGrammar(schema: object, param: string): Promise<LlamaGrammar> {
    try {
      const key = JSON.stringify(schema);
      let grammar = this.grammars.get(key);
      if (!grammar) {
        grammar = jsonSchemaGrammar(this.llama, schema, param);
        if (this.grammars.size >= 256) this.grammars.delete(this.grammars.keys().next().value!);
        this.grammars.set(key, grammar);
        grammar.catch(() => this.grammars.delete(key));
      }
      return await grammar;
    } catch (err) {
      throw schemaError(param, err);
    }
  }

  /** tool_choice 'required' or a named function: the grammar allows nothing but a call with valid arguments. */
  private async toolGrammar(request: ChatRequest): Promise<LlamaGrammar> {
    const choice = request.toolChoice;
    const tools = typeof choice === 'object' ? request.tools!.filter((t) => t.name === choice.name) : request.tools!;
    if (!tools.length) {
      throw new ApiError('invalid_request_error', `tool_choice names '${(choice as { name: string }).name}', which is not in 'tools'.`, {
        param: 'tool_choice',
      });
    }
    const options = tools.map((t) => ({
      type: 'object',
      properties: { name: { const: t.name }, arguments: t.parameters ?? { type: 'object', properties: {} } },
    }));
    return this.jsonSchemaGrammar(options.length === 1 ? options[0]! : { oneOf: options }, 'tools');
  }

  async embed(
    modelId: string,
    inputs: Array<string | number[]>,
    signal: AbortSignal,
    options: EmbedOptions = {},
  ): Promise<EmbeddingResult> {
    const host = this.host(modelId, 'embeddings');
    const release = await host.slots.acquire(signal, options.ticket);
    try {
      // Every input is checked before any is embedded: a call refused for its fifth input costs no decode.
      const tokens = inputs.map((input, i) => embeddingTokens(host, input, i, options.truncate ?? false));
      const promptTokens = tokens.reduce((n, t) => n + t.length, 0);
      const vectors = await host.context.embed(tokens, signal);
      return { vectors: vectors.map(normalize), promptTokens };
    } finally {
      release();
    }
  }

  queueState(modelId: string): { busy: number; waiting: number } | undefined {
    return this.hosts.get(modelId)?.slots.state;
  }

  dimensions(modelId: string): { size: number; shortenable: boolean } {
    const host = this.host(modelId, 'embeddings');
    return { size: host.model.embeddingVectorSize, shortenable: host.shortenable };
  }

  detokenize(modelId: string, tokens: number[]): string {
    const host = this.host(modelId, 'embeddings');
    const bad = tokens.find((t) => t >= host.vocabularySize);
    if (bad !== undefined) {
      throw new ApiError('invalid_request_error', `Token ${bad} is outside this model's vocabulary of ${host.vocabularySize}.`, {
        param: 'input',
      });
    }
    return host.model.detokenize(tokens as unknown as Parameters<LlamaModel['detokenize']>[0]);
  }
}

/**
 * A call's stop sequences, applied to its text as it is generated (stops.ts): generation is stopped through its signal
 * once one is seen, and `settle` makes what was generated the text that was passed on. Without stop sequences, the
 * text and the signal pass straight through.
 */
interface Stopping {
  stops: StopSequences | null;
  /** What generation stops by. */
  signal: AbortSignal;
  /** Each piece of text as it is generated. */
  onText(piece: string): void;
  /** The response as the call's: its text what was passed on, its stop reason a stop sequence's if one was seen. */
  settle<R extends { response: string; metadata: { stopReason: string } }>(response: R): R;
}

function stopSequences(stop: string[] | undefined, onText: (text: string) => void, signal: AbortSignal): Stopping {
  if (!stop?.length) return { stops: null, signal, onText, settle: (response) => response };
  const stops = new StopSequences(stop, onText);
  // Stopped by the client going (an abort, thrown) or by a stop sequence (an end, as node-llama-cpp's own would be).
  const halt = new AbortController();
  if (signal.aborted) halt.abort(signal.reason);
  else signal.addEventListener('abort', () => halt.abort(signal.reason), { once: true });
  return {
    stops,
    signal: halt.signal,
    onText(piece: string) {
      stops.push(piece);
      if (stops.found && !halt.signal.aborted) halt.abort(new Error('a stop sequence was generated'));
    },
    settle(response) {
      if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('aborted');
      stops.end();
      const stopReason = stops.found ? 'customStopTrigger' : response.metadata.stopReason;
      return { ...response, response: stops.text, metadata: { ...response.metadata, stopReason } };
    },
  };
}

/** What generation produced, as the call's result. `toolGrammar`: the grammar that forced a tool call, if one did. */
function resultOf(
  response: { response: string; functionCalls?: Array<{ functionName: string; params?: unknown }>; metadata: { stopReason: string } },
  usage: Usage,
  toolGrammar: LlamaGrammar | undefined,
): ChatResult {
  const cutOff = response.metadata.stopReason === 'maxTokens';
  if (toolGrammar) {
    if (cutOff) {
      // max_tokens ended the call mid-way: return what was generated, as OpenAI does, marked 'length'.
      const name = /"name"\s*:\s*"([^"]*)"/.exec(response.response)?.[1] ?? '';
      const args = /"arguments"\s*:\s*([\s\S]*)$/.exec(response.response)?.[1] ?? '';
      return { content: '', toolCalls: [{ id: newCallId(), name, arguments: args }], finishReason: 'length', usage };
    }
    const call = JSON.parse(response.response) as { name: string; arguments: unknown };
    return {
      content: '',
      toolCalls: [{ id: newCallId(), name: call.name, arguments: JSON.stringify(call.arguments) }],
      finishReason: 'tool_calls',
      usage,
    };
  }
  const toolCalls: ToolCall[] = (response.functionCalls ?? []).map((c) => ({
    id: newCallId(),
    name: c.functionName,
    arguments: JSON.stringify(c.params ?? {}),
  }));
  return {
    content: response.response,
    toolCalls,
    finishReason: toolCalls.length ? 'tool_calls' : cutOff ? 'length' : 'stop',
    usage,
  };
}

/** The tokens left for the answer once the prompt is in the context; a prompt that leaves none is the client's 400. */
function roomAfter(host: ChatHost, promptTokens: number, param: 'messages' | 'prompt'): number {
  const room = host.context.contextSize - promptTokens;
  if (room > 0) return room;
  throw new ApiError(
    'invalid_request_error',
    `This model's maximum context length is ${host.context.contextSize} tokens, but the ${param === 'messages' ? 'messages use' : 'prompt uses'} ${promptTokens}. Shorten the ${param === 'messages' ? 'messages' : 'prompt'}.`,
    { param },
  );
}

/**
 * Tokens a call used, from its sequence's meter. llama.cpp evaluates the prompt's last token in the same step that
 * yields the first generated token, and never evaluates the last generated one; the meter counts that step as
 * output, so the prompt is the input count plus one and the completion is the output count.
 */
function usageOf(sequence: LlamaContextSequence): Usage {
  const meter = sequence.tokenMeter.getState();
  return { promptTokens: meter.usedInputTokens + (meter.usedOutputTokens > 0 ? 1 : 0), completionTokens: meter.usedOutputTokens };
}

/**
 * The contexts an embeddings model embeds on. One batch holds a whole input: embedding models attend both ways, so an
 * input split across batches would be embedded wrongly (or refused by llama.cpp). Each context has its own share of
 * the threads, so the pool's decodes together use every thread and no more. They are not left to node-llama-cpp's
 * splitter (every context wanting every thread): then a decode that finds the others idle takes them all and the next
 * decodes change the thread count back and forth, which made single inputs many times slower, not faster; a decode
 * split over threads also waits for the slowest thread at every step, which small models and busy machines pay most.
 */
async function embeddingPool(model: LlamaModel, contextSize: number, options: LlamaEngineOptions): Promise<EmbeddingPool> {
  const count = Math.max(1, options.embeddingContexts ?? 2);
  const threads = Math.max(1, Math.floor(options.threads / count));
  const contexts: LlamaEmbeddingContext[] = [];
  try {
    for (let i = 0; i < count; i++) contexts.push(await model.createEmbeddingContext({ contextSize, batchSize: contextSize, threads }));
  } catch (err) {
    for (const context of contexts) await context.dispose();
    throw err;
  }
  return new EmbeddingPool(contexts);
}

/** An input's tokens as the model embeds them, or the client's 400 naming it. */
function embeddingTokens(host: EmbeddingHost, input: string | number[], i: number, truncate: boolean): Token[] {
  let tokens = typeof input === 'string' ? host.model.tokenize(input) : (input as Token[]);
  if (typeof input !== 'string') {
    const bad = input.find((t) => t >= host.vocabularySize);
    if (bad !== undefined)
      throw new ApiError(
        'invalid_request_error',
        `input[${i}] has token ${bad}, outside this model's vocabulary of ${host.vocabularySize}.`,
        {
          param: 'input',
        },
      );
  }
  if (tokens.length === 0) {
    throw new ApiError('invalid_request_error', `input[${i}] is empty. Send at least one character or token.`, { param: 'input' });
  }
  // llama.cpp adds the model's begin and end tokens to every input, and needs them inside the context.
  if (tokens.length + 2 >= host.contextSize && truncate) tokens = tokens.slice(0, host.contextSize - 3);
  if (tokens.length + 2 >= host.contextSize) {
    throw new ApiError(
      'invalid_request_error',
      `input[${i}] is ${tokens.length} tokens; this model embeds at most ${host.contextSize - 3}. Split it.`,
      {
        param: 'input',
      },
    );
  }
  return tokens;
}

/** Unit length, as OpenAI's embeddings are, so cosine similarity is a dot product. */
function normalize(vector: Float32Array): Float32Array {
  let norm = 0;
  for (const v of vector) norm += v * v;
  norm = Math.sqrt(norm);
  if (norm > 0) for (let i = 0; i < vector.length; i++) vector[i] = vector[i]! / norm;
  return vector;
}
