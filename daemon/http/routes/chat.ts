// POST /v1/chat/completions: OpenAI's shape, buffered or streamed as server-sent events.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../../config/index.js';
import type { ChatEngine, ChatMessage, ChatRequest, ChatResult, EngineRegistry, Usage } from '../../engines/index.js';
import { ApiError } from '../../errors/index.js';
import { joinedParts, JsonPosition, noRedactions, ScrubSession, StreamScrubber, type RedactionCounts } from '../../scrub/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { recordCall, recordStreamStart, type AuditDeps } from '../stages/audit.js';
import { abortOnDisconnect } from '../lifetime.js';
import { clientGone } from '../errors.js';
import { SseStream } from '../sse.js';
import { answerMatchesSchema, SCHEMA_CHECK_BUDGET_MS, SchemaCheckTimeout } from '../answer-schema.js';
import { chatCompletionBody } from './schemas.js';

/** What the chat route needs. */
export interface ChatRouteDeps extends AuditDeps {
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
  response_format?: { type: 'text' | 'json_object' | 'json_schema'; json_schema?: { name: string; schema?: Record<string, unknown> } };
  tools?: Array<{ function: { name: string; description?: string; parameters?: Record<string, unknown> } }>;
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

function engineFor(deps: ChatRouteDeps, request: FastifyRequest): { engine: ChatEngine; modelId: string } {
  const modelId = request.call.model!.id;
  const engine = deps.engines.get('chat', modelId);
  if (!engine)
    throw new ApiError('model_not_ready', `No engine is serving '${modelId}' right now. Retry shortly.`, {
      headers: { 'retry-after': '5' },
    });
  return { engine, modelId };
}

/**
 * The model's answer goes through the request's scrubbing session (same placeholders as the prompt) unless the
 * configuration turns answer scrubbing off; what it replaces is counted for the audit entry. A structured answer
 * (response_format json_object or json_schema) is scrubbed as JSON: a value where JSON has a number becomes its
 * placeholder as a string, so the answer still parses (scrub/json.ts).
 */
function answerScrubbing(deps: ChatRouteDeps, request: FastifyRequest<{ Body: ChatBody }>): AnswerScrubbing | null {
  if (!deps.config.scrub.output) return null;
  const tally = noRedactions();
  request.call.outputRedactions = tally;
  const format = request.body.response_format;
  const structured = format?.type === 'json_object' || format?.type === 'json_schema';
  return {
    session: request.call.scrubSession ?? new ScrubSession(),
    tally,
    json: structured ? new JsonPosition() : null,
    schema: format?.type === 'json_schema' ? (format.json_schema?.schema ?? null) : null,
  };
}

interface AnswerScrubbing {
  session: ScrubSession;
  tally: RedactionCounts;
  /** Where a structured answer's JSON is, while it is scrubbed; null for text. */
  json: JsonPosition | null;
  /** The structured answer's schema, when the client gave one. */
  schema: Record<string, unknown> | null;
}

/**
 * Tool calls: their arguments are JSON, scrubbed as such whatever the answer's format; their ids and names are the
 * model's text too (an upstream's model chooses them), scrubbed like any text.
 */
function scrubToolCalls(calls: ChatResult['toolCalls'], scrubbing: AnswerScrubbing | null): ChatResult['toolCalls'] {
  if (!scrubbing) return calls;
  const { session, tally } = scrubbing;
  return calls.map((c) => ({
    id: session.scrub(c.id, tally),
    name: session.scrub(c.name, tally),
    arguments: session.scrubJson(c.arguments, tally),
  }));
}

/** The buffered answer's content, scrubbed, and checked against its schema when placeholders took numbers' places. */
async function scrubContent(content: string, scrubbing: AnswerScrubbing): Promise<string> {
  if (!scrubbing.json) return scrubbing.session.scrub(content, scrubbing.tally);
  const scrubbed = scrubbing.session.scrubJson(content, scrubbing.tally, scrubbing.json);
  await checkStructured(scrubbed, scrubbing);
  return scrubbed;
}

/**
 * A structured answer in which placeholders took the place of numbers must still match its schema: where the schema
 * wants a number there, the answer is withheld rather than sent invalid (or with the value). The check runs apart,
 * within a time budget (answer-schema.ts): the schema's patterns are the client's.
 */
async function checkStructured(content: string, scrubbing: AnswerScrubbing): Promise<void> {
  if (!scrubbing.json?.quoted || !scrubbing.schema) return;
  let matches: boolean;
  try {
    matches = await answerMatchesSchema(scrubbing.schema, content);
  } catch (err) {
    if (!(err instanceof SchemaCheckTimeout)) throw err;
    throw new ApiError(
      'invalid_request_error',
      `The model's structured answer could not be checked against your schema within ${SCHEMA_CHECK_BUDGET_MS / 1000} s, so it was withheld (it holds personal data where JSON had a number, and the check must hold before it is sent). Simplify the schema: a pattern such as '(a+)+' takes exponential time.`,
      { param: 'response_format.json_schema.schema' },
    );
  }
  if (matches) return;
  throw new ApiError(
    'internal_error',
    "The model's structured answer held personal data where your schema wants a number, so it was withheld. Retry, or let that field be a string.",
  );
}

export function registerChatRoute(v1: FastifyInstance, deps: ChatRouteDeps): void {
  const declaration: RouteDeclaration = { auth: true, capability: 'chat', tokens: estimateTokens, scrub: 'chat' };
  v1.post<{ Body: ChatBody }>(
    '/chat/completions',
    { schema: { body: chatCompletionBody }, config: { declaration } },
    async (request, reply) => {
      const chatRequest = toChatRequest(request.body);
      const { engine, modelId } = engineFor(deps, request);
      // On disk before the engine starts, so before the stream's first byte: a stream cut off leaves its start.
      if (request.body.stream) await recordStreamStart(deps, request);
      const id = `chatcmpl-${request.id}`;
      const created = Math.floor(Date.now() / 1000);
      const onUsage = (u: Usage) => {
        request.call.usedTokens = u.promptTokens + u.completionTokens;
        request.call.completionTokens = u.completionTokens;
      };
      const scrubbing = answerScrubbing(deps, request);
      if (request.body.stream) {
        const record = (sha: string, status: number) => recordCall(deps, request, status, sha);
        return stream(request, reply, { engine, modelId, chatRequest, id, created, onUsage, scrubbing, record });
      }

      const work = engine.chat(modelId, chatRequest, { onText: () => {}, signal: abortOnDisconnect(request, reply), onUsage });
      startedEngineWork(request.call, request.call.model!, work);
      const result = await work;
      const content = scrubbing ? await scrubContent(result.content, scrubbing) : result.content;
      const toolCalls = scrubToolCalls(result.toolCalls, scrubbing);
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
              content: toolCalls.length ? null : content,
              refusal: null,
              ...(toolCalls.length
                ? {
                    tool_calls: toolCalls.map((c) => ({
                      id: c.id,
                      type: 'function',
                      function: { name: c.name, arguments: c.arguments },
                    })),
                  }
                : {}),
            },
            logprobs: null,
            finish_reason: result.finishReason,
          },
        ],
        usage: usageObject(result),
      };
    },
  );
}

interface StreamArgs {
  engine: ChatEngine;
  modelId: string;
  chatRequest: ChatRequest;
  id: string;
  created: number;
  onUsage: (u: { promptTokens: number; completionTokens: number }) => void;
  scrubbing: AnswerScrubbing | null;
  /** Appends the call's audit entry with the digest of what was streamed; null when the call is not audited. */
  record: (sentSha256: string, status: number) => Promise<number> | null;
}

/** The stream's events: the chunks of the answer, OpenAI's chat.completion.chunk. */
function chunkEvents(id: string, created: number, modelId: string) {
  const chunk = (choices: unknown[], extra?: { usage: ReturnType<typeof usageObject> }) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model: modelId, choices, ...extra })}\n\n`;
  const choice = (delta: Record<string, unknown>, finishReason: ChatResult['finishReason'] | null = null) => [
    { index: 0, delta, logprobs: null, finish_reason: finishReason },
  ];
  return {
    role: () => chunk(choice({ role: 'assistant', content: '' })),
    content: (content: string) => chunk(choice({ content })),
    toolCalls: (calls: ChatResult['toolCalls']) =>
      chunk(
        choice({
          tool_calls: calls.map((c, i) => ({ index: i, id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
        }),
      ),
    finish: (reason: ChatResult['finishReason']) => chunk(choice({}, reason)),
    usage: (result: ChatResult) => chunk([], { usage: usageObject(result) }),
  };
}

const errorEvent = (error: ApiError) => `data: ${JSON.stringify(error.toBody())}\n\n`;

const asError = (err: unknown) => (err instanceof Error ? err : new Error(String(err)));

/**
 * Streams a chat completion as server-sent events. The response commits to 200 only when the engine says the call
 * has started (it holds a place and its input checked out); until then a refusal (queue full, prompt too long) is
 * an ordinary error response with its own status and Retry-After. Long on purpose: the steps of one streamed call in
 * the order they happen, whose callbacks share the call's state; the writing itself is sse.ts's.
 */
function stream(request: FastifyRequest<{ Body: ChatBody }>, reply: FastifyReply, args: StreamArgs): Promise<FastifyReply> {
  const { engine, modelId, chatRequest, id, created, onUsage, scrubbing, record } = args;
  const chunk = chunkEvents(id, created, modelId);
  // Generation stops when the client goes or scrubbing the answer fails: one signal for both.
  const stopGenerating = new AbortController();
  const signal = abortOnDisconnect(request, reply, stopGenerating);
  // A structured answer whose placeholders took numbers' places is checked against its schema once it is whole.
  let structured = '';
  const sse = new SseStream(reply, {
    record,
    textEvent: (content) => {
      if (scrubbing?.schema) structured += content;
      return chunk.content(content);
    },
    errorEvent,
    // Text that might be the start of a value is held back until the next pieces settle it (never the whole answer).
    scrubber: scrubbing ? new StreamScrubber(scrubbing.session, scrubbing.tally, scrubbing.json ?? undefined) : null,
    onScrubFailure: () => stopGenerating.abort(),
    done: 'data: [DONE]\n\n',
  });
  // Set when scrubbing the tool calls failed (a failure scrubbing the text is the stream's: sse.scrubFailure).
  let toolCallsFailure: Error | null = null;

  return new Promise((resolve, reject) => {
    let started = false;
    const start = () => {
      if (started) return;
      started = true;
      sse.open();
      sse.event(chunk.role());
      resolve(reply);
    };
    const work = engine
      .chat(modelId, chatRequest, {
        onStart: start,
        stream: true,
        onText: (text) => {
          start();
          sse.text(text);
        },
        signal,
        onUsage,
      })
      .then(async (result) => {
        // The engine is done: the text's pending pieces go out, and the scrubber's hold-back and every event from here
        // wait for the audit entry. For an engine that never said it started (so sent no text), so does the role chunk.
        sse.endText();
        start();
        if (sse.scrubFailure) throw sse.scrubFailure;
        if (scrubbing) await checkStructured(structured, scrubbing);
        let toolCalls: ChatResult['toolCalls'];
        try {
          toolCalls = scrubToolCalls(result.toolCalls, scrubbing);
        } catch (err) {
          throw (toolCallsFailure = asError(err));
        }
        if (toolCalls.length) sse.event(chunk.toolCalls(toolCalls));
        sse.event(chunk.finish(result.finishReason));
        if (request.body.stream_options?.include_usage) sse.event(chunk.usage(result));
        return sse.finish();
      })
      .catch((err: unknown) => {
        if (!started) {
          reject(asError(err));
          return;
        }
        // What was made before the failure is sent before its error event, and so is what the scrubber held back:
        // nothing more will come to change how it is judged.
        sse.endText({ failed: true });
        const scrubFailure = sse.scrubFailure ?? toolCallsFailure;
        if (scrubFailure && !clientGone(request)) {
          // The message names no value; the answer's remaining text is dropped.
          request.log.error({ err: scrubFailure.message }, 'scrubbing the answer failed');
          const error = new ApiError(
            'internal_error',
            'Scrubbing the answer failed, so the rest of it was withheld. Retry; if it persists, report the X-Request-Id.',
          );
          sse.event(errorEvent(error));
          return sse.finish(error.status);
        } else if (!clientGone(request)) {
          const error =
            err instanceof ApiError ? err : new ApiError('internal_error', 'The engine failed while generating. Retry the request.');
          if (!(err instanceof ApiError)) request.log.error({ err }, 'chat stream failed');
          sse.event(errorEvent(error));
          return sse.finish(error.status);
        }
        return sse.finish();
      });
    startedEngineWork(request.call, request.call.model!, work);
  });
}
