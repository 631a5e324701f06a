// Chat through an OpenAI-compatible upstream. The daemon's pipeline has already authenticated, limited and scrubbed
// the call; this adapter sends the scrubbed request under the upstream's own model name, and hands the answer back
// piece by piece (streamed) or whole, so the route scrubs, audits and shapes it exactly as it does a local model's.
// What the upstream says about itself (its errors, its model names, its ids) stays here: callers see our error
// shape and our model id.
import type { FastifyBaseLogger } from 'fastify';
import { ApiError } from '../../errors/index.js';
import type {
  ChatCallOptions,
  ChatEngine,
  ChatRequest,
  ChatResult,
  CompletionRequest,
  CompletionResult,
  QueueState,
  ToolCall,
  Usage,
} from '../types.js';
import { CallsInFlight, closeClients, routeOf } from './calls.js';
import type { UpstreamClient, UpstreamResponse } from './client.js';
import { readJson } from './body.js';
import { callUpstream, type FailedCall } from './errors.js';
import { SseReader } from './sse.js';

export interface UpstreamRoute {
  client: UpstreamClient;
  /** The name the upstream knows the model by. */
  upstreamModel: string;
}

type FinishReason = ChatResult['finishReason'];

interface CompletionChoice {
  message?: { content?: string | null; tool_calls?: WireToolCall[] };
  delta?: { content?: string | null; tool_calls?: WireToolCallDelta[] };
  /** A text completion's (/completions). */
  text?: string | null;
  finish_reason?: string | null;
}

interface WireToolCall {
  id?: string;
  function?: { name?: string; arguments?: string };
}

interface WireToolCallDelta extends WireToolCall {
  index?: number;
}

interface Completion {
  choices?: CompletionChoice[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
  error?: unknown;
}

/** The upstream's JSON body for a chat request, OpenAI's shape, with the upstream's model name. */
export function upstreamChatBody(model: string, request: ChatRequest, stream: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {
    model,
    messages: request.messages.map((m) => {
      const message: Record<string, unknown> = { role: m.role, content: m.content };
      if (m.name) message.name = m.name;
      if (m.toolCallId) message.tool_call_id = m.toolCallId;
      if (m.toolCalls?.length) {
        message.tool_calls = m.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
        if (!m.content) message.content = null;
      }
      return message;
    }),
  };
  if (request.temperature !== undefined) body.temperature = request.temperature;
  if (request.topP !== undefined) body.top_p = request.topP;
  if (request.maxTokens !== undefined) body.max_tokens = request.maxTokens;
  if (request.stop) body.stop = request.stop;
  if (request.seed !== undefined) body.seed = request.seed;
  const format = request.responseFormat;
  if (format?.type === 'json_object') body.response_format = { type: 'json_object' };
  if (format?.type === 'json_schema')
    body.response_format = { type: 'json_schema', json_schema: { name: 'response', schema: format.schema } };
  if (request.tools?.length) {
    body.tools = request.tools.map((t) => ({
      type: 'function',
      function: {
        name: t.name,
        ...(t.description ? { description: t.description } : {}),
        ...(t.parameters ? { parameters: t.parameters } : {}),
      },
    }));
  }
  if (request.toolChoice !== undefined) {
    body.tool_choice =
      typeof request.toolChoice === 'string' ? request.toolChoice : { type: 'function', function: { name: request.toolChoice.name } };
  }
  if (stream) {
    body.stream = true;
    body.stream_options = { include_usage: true };
  }
  return body;
}

function finishReasonOf(reason: string | null | undefined, toolCalls: number): FinishReason {
  if (reason === 'length') return 'length';
  if (reason === 'content_filter') return 'content_filter';
  if (reason === 'tool_calls' || reason === 'function_call' || (toolCalls > 0 && reason !== 'stop')) return 'tool_calls';
  return toolCalls > 0 ? 'tool_calls' : 'stop';
}

/** The upstream's JSON body for a text completion, OpenAI's shape, with the upstream's model name. */
export function upstreamCompletionBody(model: string, request: CompletionRequest, stream: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = { model, prompt: request.prompt, max_tokens: request.maxTokens };
  if (request.suffix !== undefined) body.suffix = request.suffix;
  if (request.temperature !== undefined) body.temperature = request.temperature;
  if (request.topP !== undefined) body.top_p = request.topP;
  if (request.stop) body.stop = request.stop;
  if (request.seed !== undefined) body.seed = request.seed;
  if (stream) {
    body.stream = true;
    body.stream_options = { include_usage: true };
  }
  return body;
}

/** The UTF-8 bytes of a chat request's texts: an upper bound of its prompt's tokens (a token is at least a byte). */
function chatPromptBytes(request: ChatRequest): number {
  let bytes = 0;
  for (const m of request.messages) bytes += Buffer.byteLength(m.content) + 4;
  return bytes;
}

/**
 * Tokens used, as the upstream reports them; when it reports none (some servers omit usage), an upper bound: the
 * prompt's bytes, and a token or more for each streamed piece.
 */
function usageOf(reported: Completion['usage'], promptBytes: number, pieces: number): Usage {
  if (reported && typeof reported.prompt_tokens === 'number' && typeof reported.completion_tokens === 'number') {
    return { promptTokens: reported.prompt_tokens, completionTokens: reported.completion_tokens };
  }
  return { promptTokens: promptBytes, completionTokens: pieces };
}

export class UpstreamChatEngine implements ChatEngine {
  /** Calls in flight per model, for health (an upstream queues on its own side, so nothing waits here). */
  private readonly calls: CallsInFlight;

  constructor(
    private readonly routes: ReadonlyMap<string, UpstreamRoute>,
    private readonly log: FastifyBaseLogger,
  ) {
    this.calls = new CallsInFlight(routes);
  }

  chat(modelId: string, request: ChatRequest, options: ChatCallOptions): Promise<ChatResult> {
    const route = routeOf(this.routes, modelId);
    const body = JSON.stringify(upstreamChatBody(route.upstreamModel, request, options.stream === true));
    const promptBytes = chatPromptBytes(request);
    return this.call(modelId, route, '/chat/completions', body, options, promptBytes, {
      whole: (completion) => {
        const result = this.fromCompletion(completion, promptBytes);
        return { result, text: result.content };
      },
      streamed: () => {
        const calls: WireToolCall[] = [];
        return {
          piece: (choice) => {
            for (const part of choice.delta?.tool_calls ?? []) {
              const call = (calls[part.index ?? calls.length] ??= { function: { name: '', arguments: '' } });
              if (part.id) call.id = part.id;
              if (part.function?.name) call.function!.name += part.function.name;
              if (part.function?.arguments) call.function!.arguments += part.function.arguments;
            }
            return choice.delta?.content ?? '';
          },
          result: (content, finish, usage) => {
            const toolCalls = calls
              .filter((c) => c !== undefined)
              .map((c, i) => ({ id: c.id ?? `call_${i}`, name: c.function!.name ?? '', arguments: c.function!.arguments ?? '' }));
            return { content, toolCalls, finishReason: finishReasonOf(finish, toolCalls.length), usage };
          },
        };
      },
    });
  }

  complete(modelId: string, request: CompletionRequest, options: ChatCallOptions): Promise<CompletionResult> {
    const route = routeOf(this.routes, modelId);
    const body = JSON.stringify(upstreamCompletionBody(route.upstreamModel, request, options.stream === true));
    const promptBytes = Buffer.byteLength(request.prompt) + Buffer.byteLength(request.suffix ?? '');
    const finishOf = (reason: string | null | undefined) => (reason === 'length' ? 'length' : 'stop');
    return this.call(modelId, route, '/completions', body, options, promptBytes, {
      whole: (completion) => {
        if (completion.error) throw new ApiError('internal_error', 'The upstream answered with an error. Retry the request.');
        const choice = completion.choices?.[0];
        if (typeof choice?.text !== 'string') throw new Error('the upstream answer has no choices[0].text');
        const result: CompletionResult = {
          text: choice.text,
          finishReason: finishOf(choice.finish_reason),
          usage: usageOf(completion.usage, promptBytes, 0),
        };
        return { result, text: result.text };
      },
      streamed: () => ({
        piece: (choice) => choice.text ?? '',
        result: (text, finish, usage) => ({ text, finishReason: finishOf(finish), usage }),
      }),
    });
  }

  /**
   * Sends one call to the upstream and reads its answer, whole or streamed (whichever the upstream sent), handing the
   * text on as it comes; tells `onUsage` what was used, however it ends.
   */
  private async call<T extends { usage: Usage }>(
    modelId: string,
    route: UpstreamRoute,
    path: string,
    body: string,
    options: ChatCallOptions,
    promptBytes: number,
    reading: {
      whole: (completion: Completion) => { result: T; text: string };
      streamed: () => {
        piece: (choice: CompletionChoice) => string;
        result: (text: string, finish: string | null, usage: Usage) => T;
      };
    },
  ): Promise<T> {
    const call: FailedCall = { client: route.client, upstreamModel: route.upstreamModel, modelId, log: this.log };
    let pieces = 0;
    let usage: Usage | null = null;
    /** The upstream took the call (a 200 arrived): only then may it have used tokens. */
    let taken = false;
    const { signal } = options;
    try {
      const result = await this.calls.track(
        modelId,
        () =>
          callUpstream(
            call,
            signal,
            () => route.client.post(path, body, signal),
            async (response) => {
              taken = true;
              options.onStart?.();
              const type = response.header('content-type') ?? '';
              if (type.startsWith('text/event-stream')) {
                return this.readStream(response, call, reading.streamed(), options, promptBytes, (n) => (pieces = n));
              }
              const whole = reading.whole(await readJson<Completion>(response, 16 * 1024 * 1024));
              // An upstream that answered a stream request in one piece: its text is still handed on as it is.
              if (options.stream && whole.text) options.onText(whole.text);
              return whole.result;
            },
          ),
        { signal, ticket: options.ticket },
      );
      usage = result.usage;
      return result;
    } finally {
      // A call the upstream never took used nothing: its reservation is given back and nothing is billed.
      options.onUsage?.(usage ?? (taken ? usageOf(null, promptBytes, pieces) : { promptTokens: 0, completionTokens: 0 }));
    }
  }

  queueState(modelId: string): QueueState | undefined {
    return this.calls.queueState(modelId);
  }

  close(): Promise<void> {
    return closeClients(this.routes);
  }

  private fromCompletion(completion: Completion, promptBytes: number): ChatResult {
    if (completion.error) throw new ApiError('internal_error', 'The upstream answered with an error. Retry the request.');
    const choice = completion.choices?.[0];
    const message = choice?.message;
    if (!message) throw new Error('the upstream answer has no choices[0].message');
    const toolCalls: ToolCall[] = (message.tool_calls ?? []).map((c, i) => ({
      id: c.id ?? `call_${i}`,
      name: c.function?.name ?? '',
      arguments: c.function?.arguments ?? '',
    }));
    return {
      content: message.content ?? '',
      toolCalls,
      finishReason: finishReasonOf(choice.finish_reason, toolCalls.length),
      usage: usageOf(completion.usage, promptBytes, 0),
    };
  }

  private async readStream<T>(
    response: UpstreamResponse,
    call: FailedCall,
    events: { piece: (choice: CompletionChoice) => string; result: (text: string, finish: string | null, usage: Usage) => T },
    options: ChatCallOptions,
    promptBytes: number,
    counted: (pieces: number) => void,
  ): Promise<T> {
    let text = '';
    let pieces = 0;
    let finish: string | null = null;
    let reported: Completion['usage'] = null;
    let done = false;
    const reader = new SseReader((data) => {
      if (done) return;
      if (data === '[DONE]') {
        done = true;
        return;
      }
      const event = JSON.parse(data) as Completion;
      if (event.error) {
        call.log.warn({ upstream: call.client.name, model: call.modelId }, 'the upstream sent an error in the middle of a stream');
        throw new ApiError('internal_error', 'The upstream failed in the middle of the answer. Retry the request.');
      }
      if (event.usage) reported = event.usage;
      const choice = event.choices?.[0];
      if (!choice) return;
      if (choice.finish_reason) finish = choice.finish_reason;
      const piece = events.piece(choice);
      if (piece) {
        text += piece;
        counted(++pieces);
        options.onText(piece);
      }
    });
    // The body comes as bytes; a character cut between two pieces is joined by the decoder.
    const decoder = new TextDecoder();
    await response.each((bytes) => reader.push(decoder.decode(bytes, { stream: true })));
    reader.push(decoder.decode());
    reader.end();
    if (!done && finish === null) throw new Error('the upstream stream ended before its last event');
    return events.result(text, finish, usageOf(reported, promptBytes, pieces));
  }
}
