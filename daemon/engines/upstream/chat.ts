// Chat through an OpenAI-compatible upstream. The daemon's pipeline has already authenticated, limited and scrubbed
// the call; this adapter sends the scrubbed request under the upstream's own model name, and hands the answer back
// piece by piece (streamed) or whole, so the route scrubs, audits and shapes it exactly as it does a local model's.
// What the upstream says about itself (its errors, its model names, its ids) stays here: callers see our error
// shape and our model id.
import type { FastifyBaseLogger } from 'fastify';
import { ApiError } from '../../errors/index.js';
import type { ChatCallOptions, ChatEngine, ChatRequest, ChatResult, QueueState, ToolCall, Usage } from '../types.js';
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

/**
 * Tokens when the upstream reports none (some servers omit usage): a token is at least one UTF-8 byte, so the bytes
 * of the prompt bound it from above, and each streamed piece is one token or more.
 */
function estimatedUsage(request: ChatRequest, pieces: number): Usage {
  let bytes = 0;
  for (const m of request.messages) bytes += Buffer.byteLength(m.content) + 4;
  return { promptTokens: bytes, completionTokens: pieces };
}

function usageOf(reported: Completion['usage'], request: ChatRequest, pieces: number): Usage {
  if (reported && typeof reported.prompt_tokens === 'number' && typeof reported.completion_tokens === 'number') {
    return { promptTokens: reported.prompt_tokens, completionTokens: reported.completion_tokens };
  }
  return estimatedUsage(request, pieces);
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

  async chat(modelId: string, request: ChatRequest, options: ChatCallOptions): Promise<ChatResult> {
    const route = routeOf(this.routes, modelId);
    const stream = options.stream === true;
    const body = JSON.stringify(upstreamChatBody(route.upstreamModel, request, stream));
    const call: FailedCall = { client: route.client, upstreamModel: route.upstreamModel, modelId, log: this.log };
    let pieces = 0;
    let usage: Usage | null = null;
    /** The upstream took the call (a 200 arrived): only then may it have used tokens. */
    let taken = false;
    const { signal } = options;
    try {
      const result = await this.calls.track(modelId, () =>
        callUpstream(
          call,
          signal,
          () => route.client.post('/chat/completions', body, signal),
          async (response) => {
            taken = true;
            options.onStart?.();
            const type = response.header('content-type') ?? '';
            if (type.startsWith('text/event-stream')) return this.readStream(response, call, request, options, (n) => (pieces = n));
            const whole = this.fromCompletion(await readJson<Completion>(response, 16 * 1024 * 1024), request);
            // An upstream that answered a stream request in one piece: its text is still handed on as it is.
            if (stream && whole.content) options.onText(whole.content);
            return whole;
          },
        ),
      );
      usage = result.usage;
      return result;
    } finally {
      // A call the upstream never took used nothing: its reservation is given back and nothing is billed.
      options.onUsage?.(usage ?? (taken ? estimatedUsage(request, pieces) : { promptTokens: 0, completionTokens: 0 }));
    }
  }

  queueState(modelId: string): QueueState | undefined {
    return this.calls.queueState(modelId);
  }

  close(): Promise<void> {
    return closeClients(this.routes);
  }

  private fromCompletion(completion: Completion, request: ChatRequest): ChatResult {
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
      usage: usageOf(completion.usage, request, 0),
    };
  }

  private async readStream(
    response: UpstreamResponse,
    call: FailedCall,
    request: ChatRequest,
    options: ChatCallOptions,
    counted: (pieces: number) => void,
  ): Promise<ChatResult> {
    let content = '';
    let pieces = 0;
    let finish: string | null = null;
    let reported: Completion['usage'] = null;
    let done = false;
    const calls: WireToolCall[] = [];
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
      const delta = choice.delta;
      if (!delta) return;
      if (delta.content) {
        content += delta.content;
        counted(++pieces);
        options.onText(delta.content);
      }
      for (const part of delta.tool_calls ?? []) {
        const call = (calls[part.index ?? calls.length] ??= { function: { name: '', arguments: '' } });
        if (part.id) call.id = part.id;
        if (part.function?.name) call.function!.name += part.function.name;
        if (part.function?.arguments) call.function!.arguments += part.function.arguments;
      }
    });
    // The body comes as bytes; a character cut between two pieces is joined by the decoder.
    const decoder = new TextDecoder();
    await response.each((bytes) => reader.push(decoder.decode(bytes, { stream: true })));
    reader.push(decoder.decode());
    reader.end();
    if (!done && finish === null) throw new Error('the upstream stream ended before its last event');
    const toolCalls = calls
      .filter((c) => c !== undefined)
      .map((c, i) => ({ id: c.id ?? `call_${i}`, name: c.function!.name ?? '', arguments: c.function!.arguments ?? '' }));
    return { content, toolCalls, finishReason: finishReasonOf(finish, toolCalls.length), usage: usageOf(reported, request, pieces) };
  }
}
