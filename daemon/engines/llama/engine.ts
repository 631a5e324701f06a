// llama.cpp through node-llama-cpp: chat and embeddings for the GGUF models the inventory lists. Each chat model
// has one context with `parallel` sequences; each call takes a sequence (waiting in a bounded queue if none is
// free), and gives it back when it ends or its client goes away, so an aborted call frees its KV cache at once.
import { randomBytes } from 'node:crypto';
import {
  LlamaChat,
  resolveChatWrapper,
  type ChatWrapper,
  type ChatHistoryItem,
  type ChatModelFunctions,
  type GbnfJsonSchema,
  type Llama,
  type LlamaContext,
  type LlamaEmbeddingContext,
  type LlamaGrammar,
  type LlamaJsonSchemaGrammar,
  type LlamaModel,
} from 'node-llama-cpp';
import { ApiError } from '../../errors/index.js';
import { servingContextOf, type ManifestEntry } from '../../models/index.js';
import type { ChatCallOptions, ChatEngine, ChatRequest, ChatResult, EmbeddingEngine, EmbeddingResult, ToolCall } from '../index.js';
import { Slots } from '../slots.js';
import { toHistory } from './history.js';

export interface LlamaEngineOptions {
  threads: number;
  parallel: number;
  queue: number;
  gpu: 'auto' | 'off';
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
  context: LlamaEmbeddingContext;
  contextSize: number;
  vocabularySize: number;
  slots: Slots;
  shortenable: boolean;
}

type Host = ChatHost | EmbeddingHost;

const newCallId = () => `call_${randomBytes(12).toString('base64url')}`;

function schemaError(param: string, err: unknown): ApiError {
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
    const model = await this.llama.loadModel({ modelPath: path, gpuLayers: this.options.gpu === 'off' ? 0 : 'auto' });
    try {
      const contextSize = servingContextOf(entry);
      const label = `The model '${entry.id}'`;
      if (entry.capability === 'embeddings') {
        const context = await model.createEmbeddingContext({ contextSize, threads: this.options.threads });
        this.hosts.set(entry.id, {
          kind: 'embeddings',
          model,
          context,
          contextSize,
          vocabularySize: model.fileInfo.metadata.tokenizer.ggml.tokens.length,
          slots: new Slots(1, this.options.queue, label),
          shortenable: entry.dimensionsShortenable ?? false,
        });
      } else {
        const context = await model.createContext({ contextSize, sequences: this.options.parallel, threads: this.options.threads });
        this.hosts.set(entry.id, {
          kind: 'chat',
          model,
          context,
          chatWrapper: resolveChatWrapper(model),
          slots: new Slots(this.options.parallel, this.options.queue, label),
        });
      }
    } catch (err) {
      await model.dispose();
      throw err;
    }
  }

  async dispose(): Promise<void> {
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

  async chat(modelId: string, request: ChatRequest, { onText, signal, onUsage }: ChatCallOptions): Promise<ChatResult> {
    const host = this.host(modelId, 'chat');
    const release = await host.slots.acquire(signal);
    const sequence = host.context.getSequence();
    const chat = new LlamaChat({ contextSequence: sequence, chatWrapper: host.chatWrapper, autoDisposeSequence: false });
    try {
      const history = toHistory(request.messages);
      const forcedTool =
        request.tools?.length && request.toolChoice !== undefined && request.toolChoice !== 'none' && request.toolChoice !== 'auto';
      const autoTools = request.tools?.length && (request.toolChoice === undefined || request.toolChoice === 'auto');
      const functions: ChatModelFunctions | undefined = autoTools
        ? Object.fromEntries(
            request.tools!.map((t) => [
              t.name,
              {
                ...(t.description ? { description: t.description } : {}),
                ...(t.parameters ? { params: t.parameters as GbnfJsonSchema } : {}),
              },
            ]),
          )
        : undefined;

      const promptTokens = this.countPromptUpperBound(host, chat, request, history, functions);
      const room = host.context.contextSize - promptTokens;
      if (room <= 0) {
        throw new ApiError(
          'invalid_request_error',
          `This model's maximum context length is ${host.context.contextSize} tokens, but the messages use ${promptTokens}. Shorten the messages.`,
          { param: 'messages' },
        );
      }
      const maxTokens = Math.min(request.maxTokens ?? room, room);
      const toolGrammar = forcedTool ? await this.toolGrammar(request) : undefined;
      const grammar = toolGrammar ?? (await this.formatGrammar(request));
      const response = await chat.generateResponse(history, {
        signal,
        maxTokens,
        ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
        ...(request.topP !== undefined ? { topP: request.topP } : {}),
        ...(request.seed !== undefined ? { seed: request.seed } : {}),
        ...(request.stop?.length ? { customStopTriggers: request.stop } : {}),
        ...(grammar ? { grammar } : functions ? { functions, documentFunctionParams: true } : {}),
        onResponseChunk(chunk) {
          // A forced tool call is not content: it is returned as tool_calls at the end.
          if (chunk.type === undefined && !forcedTool && chunk.text) onText(chunk.text);
        },
      });
      // The sequence is this call's alone, so its meter counts exactly the prompt it evaluated and what it generated.
      const meter = sequence.tokenMeter.getState();
      const usage = { promptTokens: meter.usedInputTokens, completionTokens: meter.usedOutputTokens };
      if (forcedTool) {
        const call = toolGrammar!.parse(response.response) as unknown as { name: string; arguments: unknown };
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
      const stop = response.metadata.stopReason;
      return {
        content: response.response,
        toolCalls,
        finishReason: toolCalls.length ? 'tool_calls' : stop === 'maxTokens' ? 'length' : 'stop',
        usage,
      };
    } finally {
      const meter = sequence.tokenMeter.getState();
      onUsage?.({ promptTokens: meter.usedInputTokens, completionTokens: meter.usedOutputTokens });
      chat.dispose();
      await sequence.dispose();
      release();
    }
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

  private async jsonSchemaGrammar(schema: object, param: string): Promise<LlamaJsonSchemaGrammar<GbnfJsonSchema>> {
    try {
      // node-llama-cpp infers a result type from literal schemas; ours arrive at run time, so the type is erased.
      return await this.llama.createGrammarForJsonSchema(schema as Parameters<Llama['createGrammarForJsonSchema']>[0]);
    } catch (err) {
      throw schemaError(param, err);
    }
  }

  /** tool_choice 'required' or a named function: the grammar allows nothing but a call with valid arguments. */
  private async toolGrammar(request: ChatRequest): Promise<LlamaJsonSchemaGrammar<GbnfJsonSchema>> {
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

  async embed(modelId: string, inputs: Array<string | number[]>, signal: AbortSignal): Promise<EmbeddingResult> {
    const host = this.host(modelId, 'embeddings');
    const release = await host.slots.acquire(signal);
    try {
      const vocabulary = host.vocabularySize;
      const vectors: Float32Array[] = [];
      let promptTokens = 0;
      for (const [i, input] of inputs.entries()) {
        if (signal.aborted) throw signal.reason as Error;
        const tokens = typeof input === 'string' ? host.model.tokenize(input) : input;
        if (typeof input !== 'string') {
          const bad = input.find((t) => t >= vocabulary);
          if (bad !== undefined)
            throw new ApiError('invalid_request_error', `input[${i}] has token ${bad}, outside this model's vocabulary of ${vocabulary}.`, {
              param: 'input',
            });
        }
        if (tokens.length > host.contextSize) {
          throw new ApiError(
            'invalid_request_error',
            `input[${i}] is ${tokens.length} tokens; this model embeds at most ${host.contextSize}. Split it.`,
            { param: 'input' },
          );
        }
        promptTokens += tokens.length;
        const embedding = await host.context.getEmbeddingFor(tokens as Parameters<LlamaEmbeddingContext['getEmbeddingFor']>[0]);
        vectors.push(normalize(Float32Array.from(embedding.vector)));
      }
      return { vectors, promptTokens };
    } finally {
      release();
    }
  }

  dimensions(modelId: string): { size: number; shortenable: boolean } {
    const host = this.host(modelId, 'embeddings');
    return { size: host.model.embeddingVectorSize, shortenable: host.shortenable };
  }
}

/** Unit length, as OpenAI's embeddings are, so cosine similarity is a dot product. */
function normalize(vector: Float32Array): Float32Array {
  let norm = 0;
  for (const v of vector) norm += v * v;
  norm = Math.sqrt(norm);
  if (norm > 0) for (let i = 0; i < vector.length; i++) vector[i] = vector[i]! / norm;
  return vector;
}
