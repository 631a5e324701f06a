// Chat through an OpenAI-compatible upstream. The daemon's pipeline has already authenticated, limited and scrubbed
// the call; this adapter sends the scrubbed request under the upstream's own model name, and hands the answer back
// piece by piece (streamed) or whole, so the route scrubs, audits and shapes it exactly as it does a local model's.
// What the upstream says about itself (its errors, its model names, its ids) stays here: callers see our error
// shape and our model id.
import type { FastifyBaseLogger } from 'fastify';
import { ApiError } from '../../errors/index.js';
import type { ChatCallOptions, ChatEngine, ChatRequest, ChatResult, QueueState, ToolCall, Usage } from '../index.js';
import type { UpstreamClient, UpstreamResponse } from './client.js';
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

function retryAfterOf(response: UpstreamResponse): string {
  const value = response.headers['retry-after'];
  const seconds = Number(Array.isArray(value) ? value[0] : value);
  return Number.isFinite(seconds) && seconds >= 1 && seconds <= 3600 ? String(Math.ceil(seconds)) : '2';
}

/** URLs and IP addresses (with a port): where the upstream lives is not the client's business. */
const ADDRESSES =
  /\b[a-z][a-z0-9+.-]*:\/\/\S+|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-f:.]+\](?::\d+)?|(?<![\w:])[0-9a-f]{0,4}(?::[0-9a-f]{1,4})*::(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?(?![\w:])/gi;

/**
 * The upstream's own message for a refused request, if it has OpenAI's shape: its model name replaced by ours, and
 * any address it names removed.
 */
function upstreamMessage(text: string, route: UpstreamRoute, modelId: string): string | null {
  try {
    const message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    if (typeof message !== 'string' || !message) return null;
    return message.split(route.upstreamModel).join(modelId).replace(ADDRESSES, '[address]').slice(0, 500);
  } catch {
    return null;
  }
}

export class UpstreamChatEngine implements ChatEngine {
  /** Calls in flight per model, for health (an upstream queues on its own side, so nothing waits here). */
  private readonly busy = new Map<string, number>();

  constructor(
    private readonly routes: ReadonlyMap<string, UpstreamRoute>,
    private readonly log: FastifyBaseLogger,
  ) {}

  async chat(modelId: string, request: ChatRequest, options: ChatCallOptions): Promise<ChatResult> {
    const route = this.routes.get(modelId);
    if (!route) throw new ApiError('model_not_ready', `No upstream serves '${modelId}' right now.`, { headers: { 'retry-after': '5' } });
    const stream = options.stream === true;
    const body = JSON.stringify(upstreamChatBody(route.upstreamModel, request, stream));
    let pieces = 0;
    let usage: Usage | null = null;
    this.busy.set(modelId, (this.busy.get(modelId) ?? 0) + 1);
    try {
      let response: UpstreamResponse;
      try {
        response = await route.client.post('/chat/completions', body, options.signal);
      } catch (err) {
        throw this.unreachable(err, route, modelId, options.signal);
      }
      if (response.statusCode !== 200) throw await this.refused(response, route, modelId);
      options.onStart?.();
      const type = String(response.headers['content-type'] ?? '');
      const result = type.startsWith('text/event-stream')
        ? await this.readStream(response, route, modelId, request, options, (n) => (pieces = n))
        : this.fromCompletion((await response.body.json()) as Completion, request);
      // An upstream that answered a stream request in one piece: its text is still handed on as it is.
      if (stream && !type.startsWith('text/event-stream') && result.content) options.onText(result.content);
      usage = result.usage;
      return result;
    } catch (err) {
      if (options.signal.aborted) throw options.signal.reason instanceof Error ? options.signal.reason : new Error('aborted');
      throw err instanceof ApiError ? err : this.broken(err, route, modelId);
    } finally {
      this.busy.set(modelId, this.busy.get(modelId)! - 1);
      options.onUsage?.(usage ?? estimatedUsage(request, pieces));
    }
  }

  queueState(modelId: string): QueueState | undefined {
    return this.routes.has(modelId) ? { busy: this.busy.get(modelId) ?? 0, waiting: 0 } : undefined;
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
    route: UpstreamRoute,
    modelId: string,
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
        this.log.warn({ upstream: route.client.name, model: modelId }, 'the upstream sent an error in the middle of a stream');
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
    // undici's body yields bytes; a character cut between two of them is joined by the decoder.
    const decoder = new TextDecoder();
    for await (const bytes of response.body as AsyncIterable<Uint8Array>) reader.push(decoder.decode(bytes, { stream: true }));
    reader.push(decoder.decode());
    reader.end();
    if (!done && finish === null) throw new Error('the upstream stream ended before its last event');
    const toolCalls = calls
      .filter((c) => c !== undefined)
      .map((c, i) => ({ id: c.id ?? `call_${i}`, name: c.function!.name ?? '', arguments: c.function!.arguments ?? '' }));
    return { content, toolCalls, finishReason: finishReasonOf(finish, toolCalls.length), usage: usageOf(reported, request, pieces) };
  }

  /** No response at all: refused connection, timeout, or the egress guard. */
  private unreachable(err: unknown, route: UpstreamRoute, modelId: string, signal: AbortSignal): Error {
    if (signal.aborted) return err as Error;
    const code = (err as { code?: string }).code ?? (err as Error).name;
    this.log.warn({ upstream: route.client.name, model: modelId, code }, 'the upstream did not answer');
    if (code === 'UND_ERR_HEADERS_TIMEOUT') {
      return new ApiError('server_overloaded', `The server behind '${modelId}' did not start answering in time. Retry shortly.`, {
        headers: { 'retry-after': '5' },
      });
    }
    return new ApiError('model_not_ready', `The server behind '${modelId}' is not answering. Retry shortly.`, {
      headers: { 'retry-after': '5' },
    });
  }

  /** A response other than 200: mapped to our error shape; the upstream's details go to the log only. */
  private async refused(response: UpstreamResponse, route: UpstreamRoute, modelId: string): Promise<ApiError> {
    const status = response.statusCode;
    let text = '';
    try {
      text = await response.body.text();
    } catch {
      // The status alone decides.
    }
    this.log.warn({ upstream: route.client.name, model: modelId, status }, 'the upstream refused a call');
    if (status === 400 || status === 422) {
      const message = upstreamMessage(text, route, modelId);
      return new ApiError(
        'invalid_request_error',
        `The server behind '${modelId}' refused the request as invalid${message ? `: ${message}` : '.'} Change the request and retry.`,
      );
    }
    if (status === 429 || status === 503) {
      return new ApiError(
        'server_overloaded',
        `The server behind '${modelId}' is at capacity. Retry after the number of seconds in Retry-After.`,
        {
          headers: { 'retry-after': retryAfterOf(response) },
        },
      );
    }
    if (status === 401 || status === 403 || status === 404) {
      return new ApiError(
        'model_not_ready',
        `The server behind '${modelId}' does not serve it to this daemon now (the operator should check the upstream's configuration). Retry later.`,
        { headers: { 'retry-after': '30' } },
      );
    }
    return new ApiError('internal_error', `The server behind '${modelId}' failed (status ${status}). Retry the request.`);
  }

  /** The response started but could not be read to its end. */
  private broken(err: unknown, route: UpstreamRoute, modelId: string): ApiError {
    this.log.warn({ upstream: route.client.name, model: modelId, err: (err as Error).message }, 'the upstream answer broke off');
    return new ApiError('internal_error', `The server behind '${modelId}' broke off its answer. Retry the request.`);
  }
}
