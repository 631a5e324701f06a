// POST /v1/chat/completions: OpenAI's shape, buffered or streamed as server-sent events.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../../config/index.js';
import type { ChatMessage, ChatRequest, ChatResult, EngineRegistry } from '../../engines/index.js';
import { ApiError } from '../../errors/index.js';
import { joinedParts } from '../../scrub/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { recordCall, recordStreamStart, type AuditDeps } from '../stages/audit.js';
import { abortOnDisconnect } from '../lifetime.js';
import {
  answering,
  refuseToolChoiceWithoutTools,
  chatEngineFor,
  settledContent,
  settledToolCalls,
  streamAnswer,
  usageRecorder,
  checkStructured,
  type AnswerSchema,
  type Answering,
  type StreamEvents,
} from '../answers.js';
import { noteWait, ticketFor, type TicketDeps } from '../tickets.js';
import { chatCompletionBody } from './schemas.js';

/** What the chat route needs. */
export interface ChatRouteDeps extends AuditDeps, TicketDeps {
  config: Config;
  engines: EngineRegistry;
}

type ContentPart = { type: string; text?: string };

interface ChatBody {
  model: string;
  messages: Array<{
    role: ChatMessage['role'];
    content?: string | ContentPart[] | null;
    name?: string;
    tool_call_id?: string;
    tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>;
  }>;
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  max_completion_tokens?: number;
  stop?: string | string[] | null;
  seed?: number;
  stream?: boolean;
  stream_options?: { include_usage?: boolean } | null;
  response_format?: {
    type: 'text' | 'json_object' | 'json_schema';
    json_schema?: { name: string; schema?: Record<string, unknown>; strict?: boolean | null };
  };
  tools?: Array<{ function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean | null } }>;
  logprobs?: boolean | null;
  top_logprobs?: number | null;
  service_tier?: 'auto' | 'default' | 'flex' | 'priority' | null;
  tool_choice?: 'none' | 'auto' | 'required' | { function: { name: string } };
}

/** Default ceiling on generated tokens when the client sets none, for the token limit's reservation. */
export const DEFAULT_MAX_TOKENS = 1024;

/** A message's text: the scrub stage has joined its content parts already (scrub/requests.ts), as the model sees them. */
function textOf(content: ChatBody['messages'][number]['content'], index: number): string {
  if (content == null) return '';
  return typeof content === 'string' ? content : joinedParts(content, index);
}

export function toChatRequest(body: ChatBody): ChatRequest {
  const request: ChatRequest = {
    messages: body.messages.map((m, i) => ({
      role: m.role,
      content: textOf(m.content, i),
      ...(m.name ? { name: m.name } : {}),
      ...(m.tool_call_id ? { toolCallId: m.tool_call_id } : {}),
      ...(m.tool_calls
        ? { toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) }
        : {}),
    })),
  };
  if (body.temperature !== undefined) request.temperature = body.temperature;
  if (body.top_p !== undefined) request.topP = body.top_p;
  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  if (maxTokens !== undefined) request.maxTokens = maxTokens;
  if (body.stop != null) request.stop = typeof body.stop === 'string' ? [body.stop] : body.stop;
  if (body.seed !== undefined) request.seed = body.seed;
  const format = body.response_format;
  if (format?.type === 'json_object') request.responseFormat = { type: 'json_object' };
  if (format?.type === 'json_schema') {
    if (!format.json_schema?.schema) {
      throw new ApiError('invalid_request_error', "response_format json_schema needs 'json_schema.schema'.", {
        param: 'response_format.json_schema.schema',
      });
    }
    request.responseFormat = { type: 'json_schema', schema: format.json_schema.schema };
  }
  if (body.tools?.length) {
    request.tools = body.tools.map((t) => ({
      name: t.function.name,
      ...(t.function.description ? { description: t.function.description } : {}),
      ...(t.function.parameters ? { parameters: t.function.parameters } : {}),
    }));
  }
  if (body.tool_choice !== undefined) {
    request.toolChoice = typeof body.tool_choice === 'string' ? body.tool_choice : { name: body.tool_choice.function.name };
  }
  refuseToolChoiceWithoutTools(request);
  return request;
}

/**
 * Upper bound on a call's tokens before tokenizing: a token is at least one UTF-8 byte, so the bytes of every text
 * the template will render (plus a margin per message for the template itself) bound the prompt; the completion is
 * bounded by max_tokens. Neither can exceed the model's context.
 */
function estimateTokens(raw: unknown, context: number | undefined): number {
  const body = raw as ChatBody;
  let bytes = 0;
  const text = (s: string | undefined) => (bytes += s ? Buffer.byteLength(s) : 0);
  for (const m of body.messages) {
    bytes += 16;
    if (typeof m.content === 'string') text(m.content);
    else for (const part of m.content ?? []) text(part.text);
    for (const call of m.tool_calls ?? []) {
      text(call.function.name);
      text(call.function.arguments);
    }
  }
  // A tool's schema is rendered into the prompt too; its JSON is never deep enough to matter, but is not walked
  // either (a deeply nested body must not cost a stack overflow here).
  for (const tool of body.tools ?? []) {
    text(tool.function.name);
    text(tool.function.description);
    bytes += 256;
  }
  const completion = body.max_completion_tokens ?? body.max_tokens ?? DEFAULT_MAX_TOKENS;
  return context ? Math.min(bytes, context) + Math.min(completion, context) : bytes + completion;
}

function usageObject(result: ChatResult) {
  const { promptTokens, completionTokens } = result.usage;
  return { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens };
}

/**
 * Fields we cannot serve, refused by name rather than ignored: token probabilities would show the model's raw tokens,
 * which the answer's scrubbing cannot cover (a value in the answer, or in an alternative the model weighed).
 */
function refuseUnserved(body: ChatBody): void {
  if (body.logprobs === true || (body.top_logprobs ?? 0) > 0) {
    throw new ApiError(
      'invalid_request_error',
      "Token log probabilities are not offered: they would show the model's raw tokens, which personal-data scrubbing cannot cover. Leave out 'logprobs' and 'top_logprobs'.",
      { param: body.logprobs === true ? 'logprobs' : 'top_logprobs' },
    );
  }
}

/** How the chat answer is settled: its format's schema (strict or not) and its strict tools. */
function chatAnswering(config: Config, request: FastifyRequest<{ Body: ChatBody }>): Answering {
  const body = request.body;
  const format = body.response_format;
  const schema: AnswerSchema | null =
    format?.type === 'json_schema' && format.json_schema?.schema
      ? { schema: format.json_schema.schema, strict: format.json_schema.strict === true, param: 'response_format.json_schema.schema' }
      : null;
  const strictTools = new Map<string, Record<string, unknown>>();
  for (const tool of body.tools ?? []) {
    if (tool.function.strict === true) strictTools.set(tool.function.name, tool.function.parameters ?? { type: 'object' });
  }
  return answering(config, request, {
    json: format?.type === 'json_object' || format?.type === 'json_schema',
    schema,
    strictTools,
    lengthParam: body.max_completion_tokens !== undefined ? 'max_completion_tokens' : 'max_tokens',
  });
}

export function registerChatRoute(v1: FastifyInstance, deps: ChatRouteDeps): void {
  const declaration: RouteDeclaration = { auth: true, capability: 'chat', tokens: estimateTokens, scrub: 'chat' };
  v1.post<{ Body: ChatBody }>(
    '/chat/completions',
    { schema: { body: chatCompletionBody }, config: { declaration } },
    async (request, reply) => {
      refuseUnserved(request.body);
      const chatRequest = toChatRequest(request.body);
      const { engine, modelId } = chatEngineFor(deps.engines, request);
      // On disk before the engine starts, so before the stream's first byte: a stream cut off leaves its start.
      if (request.body.stream) await recordStreamStart(deps, request, reply);
      const id = `chatcmpl-${request.id}`;
      const created = Math.floor(Date.now() / 1000);
      const onUsage = usageRecorder(request);
      const answer = chatAnswering(deps.config, request);
      const ticket = ticketFor(deps, request, request.body.service_tier);
      if (request.body.stream) {
        return streamAnswer(request, reply, {
          run: (options) => engine.chat(modelId, chatRequest, options),
          events: chunkEvents(
            { id, created, model: modelId, service_tier: ticket.tier },
            request.body.stream_options?.include_usage === true,
            answer,
          ),
          answer,
          onUsage,
          ticket,
          record: (sha, status) => recordCall(deps, request, status, sha),
        });
      }

      const work = engine.chat(modelId, chatRequest, { onText: () => {}, signal: abortOnDisconnect(request, reply), onUsage, ticket });
      startedEngineWork(request.call, request.call.model!, work);
      const result = await work;
      noteWait(reply, ticket);
      const toolCalls = await settledToolCalls(result.toolCalls, result.finishReason, answer);
      const content = toolCalls.length ? null : await settledContent(result.content, result.finishReason, answer);
      return {
        id,
        object: 'chat.completion',
        created,
        model: modelId,
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content,
              refusal: null,
              ...(toolCalls.length ? { tool_calls: wireToolCalls(toolCalls) } : {}),
            },
            logprobs: null,
            finish_reason: result.finishReason,
          },
        ],
        usage: usageObject(result),
        service_tier: ticket.tier,
      };
    },
  );
}

/** Tool calls as OpenAI sends them; a stream's deltas number them. */
function wireToolCalls(calls: ChatResult['toolCalls'], streamed = false) {
  return calls.map((c, i) => ({
    ...(streamed ? { index: i } : {}),
    id: c.id,
    type: 'function',
    function: { name: c.name, arguments: c.arguments },
  }));
}

/** The stream's events: the chunks of the answer, OpenAI's chat.completion.chunk, and `[DONE]`. */
function chunkEvents(
  head: { id: string; created: number; model: string; service_tier: string },
  includeUsage: boolean,
  answer: Answering,
): StreamEvents<ChatResult> {
  const { id, created, model, service_tier } = head;
  const chunk = (choices: unknown[], extra?: { usage: ReturnType<typeof usageObject> }) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, service_tier, choices, ...extra })}\n\n`;
  const choice = (delta: Record<string, unknown>, finishReason: ChatResult['finishReason'] | null = null) => [
    { index: 0, delta, logprobs: null, finish_reason: finishReason },
  ];
  return {
    opening: () => chunk(choice({ role: 'assistant', content: '' })),
    text: (content) => chunk(choice({ content })),
    async closing(result, sent) {
      const toolCalls = await settledToolCalls(result.toolCalls, result.finishReason, answer);
      if (!toolCalls.length) await checkStructured(sent, result.finishReason, answer);
      let events = toolCalls.length ? chunk(choice({ tool_calls: wireToolCalls(toolCalls, true) })) : '';
      events += chunk(choice({}, result.finishReason));
      if (includeUsage) events += chunk([], { usage: usageObject(result) });
      return events;
    },
    error: (error) => `data: ${JSON.stringify(error.toBody())}\n\n`,
    done: 'data: [DONE]\n\n',
  };
}
