// OpenAI's Responses API (/v1/responses) on the chat engines and the same pipeline: a request's input (and, with
// previous_response_id, the conversation it continues) becomes a chat call; its answer comes back as output items,
// whole or as typed events. With `store` (OpenAI's default) the response is kept, scrubbed, for its project: GET, DELETE,
// its input items, and continuing from it. The request side is responses-input.ts.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../../config/index.js';
import type { ChatCallOptions, ChatResult, EngineRegistry, ToolCall, Usage } from '../../engines/index.js';
import { ApiError } from '../../errors/index.js';
import type { ResponseObject, ResponseStore, StoredItem } from '../../responses/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { recordCall, recordStreamStart, type AuditDeps } from '../stages/audit.js';
import { abortOnDisconnect } from '../lifetime.js';
import {
  answering,
  chatEngineFor,
  checkStructured,
  settledContent,
  settledToolCalls,
  streamAnswer,
  usageRecorder,
  type Answering,
  type StreamEvents,
} from '../answers.js';
import {
  asResponsesError,
  chatMessages,
  chatRequestOf,
  estimateTokens,
  inputItems,
  itemId,
  refuseUnansweredOutputs,
  refuseUnserved,
  strictTools,
  type ResponsesBody,
  type ResponsesFormat,
} from './responses-input.js';
import { noteWait, ticketFor, type TicketDeps } from '../tickets.js';
import { responsesBody } from './schemas.js';

export interface ResponsesRouteDeps extends AuditDeps, TicketDeps {
  config: Config;
  engines: EngineRegistry;
  responses: ResponseStore;
}

const ID_PARAMS = {
  type: 'object',
  properties: { id: { type: 'string', minLength: 1, maxLength: 128 } },
} as const;

export function registerResponsesRoutes(v1: FastifyInstance, deps: ResponsesRouteDeps): void {
  const declaration: RouteDeclaration = {
    auth: true,
    capability: 'chat',
    // What a call continues or refers to is the project's, read from the store.
    tokens: (body, context, call) => {
      const project = call.principal!.projectId;
      return estimateTokens(body, context, {
        conversation: (id) => deps.responses.conversation(project, id),
        item: (id) => deps.responses.item(project, id),
      });
    },
    scrub: 'responses',
  };
  v1.post<{ Body: ResponsesBody }>('/responses', { schema: { body: responsesBody }, config: { declaration } }, (request, reply) =>
    respond(deps, request, reply),
  );

  const read = { schema: { params: ID_PARAMS }, config: { declaration: { auth: true } } };
  v1.get<{ Params: { id: string }; Querystring: { stream?: string } }>('/responses/:id', read, async (request) => {
    if (request.query.stream === 'true') {
      throw new ApiError('invalid_request_error', 'A stored response is not streamed again: leave out stream.', { param: 'stream' });
    }
    return stored(deps, request, request.params.id);
  });
  v1.delete<{ Params: { id: string } }>('/responses/:id', read, async (request) => {
    const id = request.params.id;
    await deps.responses.fresh((r) => r.get(projectOf(request), id));
    if (!(await deps.responses.delete(projectOf(request), id))) throw notStored(id);
    return { id, object: 'response', deleted: true };
  });
  v1.get<{ Params: { id: string }; Querystring: ListQuery }>(
    '/responses/:id/input_items',
    {
      schema: {
        params: ID_PARAMS,
        querystring: {
          type: 'object',
          properties: {
            after: { type: 'string' },
            before: { type: 'string' },
            // Query values arrive as text and the app's ajv does not coerce types: 1 to 100, checked by pattern.
            limit: { type: 'string', pattern: '^(100|[1-9][0-9]?)$' },
            order: { enum: ['asc', 'desc'] },
          },
        },
      },
      config: { declaration: { auth: true } },
    },
    async (request) => {
      const items = await deps.responses.fresh((r) => r.inputItems(projectOf(request), request.params.id));
      if (!items) throw notStored(request.params.id);
      return listPage(items, request.query);
    },
  );
}

function projectOf(request: FastifyRequest): string {
  return request.call.principal!.projectId;
}

function notStored(id: string): ApiError {
  return new ApiError(
    'not_found',
    `No stored response '${id}' for this project: it was made with store: false, by another project, or it expired or was deleted.`,
    { param: 'id' },
  );
}

async function stored(deps: ResponsesRouteDeps, request: FastifyRequest, id: string): Promise<ResponseObject> {
  const response = await deps.responses.fresh((r) => r.get(projectOf(request), id));
  if (!response) throw notStored(id);
  return response;
}

interface ListQuery {
  after?: string;
  before?: string;
  limit?: string;
  order?: 'asc' | 'desc';
}

/** OpenAI's list page: newest first unless asked, `after`/`before` an item's id, at most `limit` (20) items. */
function listPage(items: StoredItem[], query: ListQuery) {
  let ordered = query.order === 'asc' ? items : [...items].reverse();
  const cursor = (id: string | undefined, param: string) => {
    if (id === undefined) return -1;
    const at = ordered.findIndex((i) => i.id === id);
    if (at === -1) throw new ApiError('invalid_request_error', `No input item '${id}' in this response.`, { param });
    return at;
  };
  const after = cursor(query.after, 'after');
  const before = cursor(query.before, 'before');
  ordered = ordered.slice(after + 1, before === -1 ? undefined : before);
  const limit = Number(query.limit ?? 20);
  const data = ordered.slice(0, limit);
  return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: ordered.length > limit };
}

async function respond(
  deps: ResponsesRouteDeps,
  request: FastifyRequest<{ Body: ResponsesBody }>,
  reply: Parameters<typeof streamAnswer>[1],
) {
  const body = request.body;
  refuseUnserved(body);
  const project = projectOf(request);
  let context: StoredItem[] = [];
  if (body.previous_response_id) {
    const previousId = body.previous_response_id;
    const previous = await deps.responses.fresh((r) => r.conversation(project, previousId));
    if (!previous) {
      throw new ApiError(
        'invalid_request_error',
        `previous_response_id '${body.previous_response_id}' is not a stored response of this project (or one before it expired or was deleted).`,
        { param: 'previous_response_id' },
      );
    }
    context = previous;
  }
  const input = inputItems(body, deps.responses, project);
  refuseUnansweredOutputs(context, input);
  const chatRequest = chatRequestOf(body, chatMessages(body.instructions, [...context, ...input]));
  const { engine, modelId } = chatEngineFor(deps.engines, request);
  const chat = (options: ChatCallOptions) =>
    engine.chat(modelId, chatRequest, options).catch((err: unknown) => {
      throw asResponsesError(err);
    });
  if (body.stream) await recordStreamStart(deps, request, reply);

  const format = body.text?.format;
  const answer = answering(deps.config, request, {
    json: format?.type === 'json_object' || format?.type === 'json_schema',
    schema:
      format?.type === 'json_schema' && format.schema
        ? { schema: format.schema, strict: format.strict === true, param: 'text.format.schema' }
        : null,
    strictTools: strictTools(body),
    lengthParam: 'max_output_tokens',
  });
  const ticket = ticketFor(deps, request, body.service_tier);
  const shape = new ResponseShape(`resp_${request.id.slice(4)}`, modelId, body, ticket.tier);
  const keep = async (response: ResponseObject) => {
    if (body.store !== false) await deps.responses.save(project, response, input);
  };

  if (body.stream) {
    return streamAnswer(request, reply, {
      run: chat,
      events: streamEvents(shape, answer, keep),
      answer,
      onUsage: usageRecorder(request),
      ticket,
      record: (sha, status) => recordCall(deps, request, status, sha),
    });
  }

  const work = chat({
    onText: () => {},
    signal: abortOnDisconnect(request, reply),
    onUsage: usageRecorder(request),
    ticket,
  });
  startedEngineWork(request.call, request.call.model!, work);
  const result = await work;
  noteWait(reply, ticket);
  const toolCalls = await settledToolCalls(result.toolCalls, result.finishReason, answer);
  const text = toolCalls.length && !result.content ? null : await settledContent(result.content, result.finishReason, answer);
  const response = shape.finished(result, text, toolCalls);
  await keep(response);
  return response;
}

/** The `response` object of one call, at each point of its life. */
class ResponseShape {
  readonly createdAt = Math.floor(Date.now() / 1000);
  readonly messageId = itemId('msg');

  constructor(
    readonly id: string,
    private readonly model: string,
    private readonly body: ResponsesBody,
    /** The tier the call runs at, as the response says (OpenAI's `service_tier`). */
    private readonly tier: string,
  ) {}

  /** The response with `status` and `output` (and, once finished, usage). */
  object(
    status: 'in_progress' | 'completed' | 'incomplete' | 'failed',
    output: StoredItem[],
    extra: Partial<ResponseObject> = {},
  ): ResponseObject {
    const body = this.body;
    return {
      id: this.id,
      object: 'response',
      created_at: this.createdAt,
      status,
      background: false,
      error: null,
      incomplete_details: null,
      instructions: body.instructions ?? null,
      max_output_tokens: body.max_output_tokens ?? null,
      model: this.model,
      output,
      parallel_tool_calls: body.parallel_tool_calls ?? true,
      previous_response_id: body.previous_response_id ?? null,
      reasoning: { effort: null, summary: null },
      service_tier: this.tier,
      store: body.store !== false,
      temperature: body.temperature ?? 1,
      text: { format: formatOf(body.text?.format) },
      tool_choice: toolChoiceOf(body.tool_choice),
      tools: (body.tools ?? []).map((t) => ({
        type: 'function',
        name: t.name,
        description: t.description ?? null,
        parameters: t.parameters ?? null,
        strict: t.strict !== false,
      })),
      top_p: body.top_p ?? 1,
      truncation: body.truncation ?? 'disabled',
      usage: null,
      metadata: body.metadata ?? {},
      ...extra,
    };
  }

  message(text: string, status: 'in_progress' | 'completed'): StoredItem {
    return {
      type: 'message',
      id: this.messageId,
      status,
      role: 'assistant',
      content: status === 'in_progress' ? [] : [textPart(text)],
    };
  }

  /** The finished response: its text (null when the answer is only tool calls) and its calls as output items. */
  finished(result: ChatResult, text: string | null, toolCalls: ToolCall[]): ResponseObject {
    const output: StoredItem[] = [];
    if (text !== null || !toolCalls.length) output.push(this.message(text ?? '', 'completed'));
    output.push(...toolCalls.map((call) => functionCall(call, 'completed')));
    const incomplete = result.finishReason === 'length';
    return this.object(incomplete ? 'incomplete' : 'completed', output, {
      incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
      usage: usageObject(result.usage),
    });
  }
}

/**
 * The request's text format as the response states it: only the fields OpenAI's format has (what else the client sent
 * is neither used nor kept, and was never scrubbed).
 */
function formatOf(format: ResponsesFormat | null | undefined): ResponsesFormat {
  if (format?.type === 'json_object') return { type: 'json_object' };
  if (format?.type !== 'json_schema') return { type: 'text' };
  return {
    type: 'json_schema',
    ...(format.name !== undefined ? { name: format.name } : {}),
    ...(format.description !== undefined ? { description: format.description } : {}),
    ...(format.schema !== undefined ? { schema: format.schema } : {}),
    strict: format.strict ?? null,
  };
}

/** The request's tool_choice as the response states it: a mode, or the function it names. */
function toolChoiceOf(choice: ResponsesBody['tool_choice']): NonNullable<ResponsesBody['tool_choice']> {
  if (choice == null) return 'auto';
  return typeof choice === 'string' ? choice : { type: 'function', ...(choice.name !== undefined ? { name: choice.name } : {}) };
}

function textPart(text: string) {
  return { type: 'output_text', text, annotations: [], logprobs: [] };
}

function functionCall(call: ToolCall, status: 'in_progress' | 'completed'): StoredItem {
  return { type: 'function_call', id: itemId('fc'), call_id: call.id, name: call.name, arguments: call.arguments, status };
}

function usageObject(usage: Usage) {
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

/**
 * The stream's typed events, each numbered: the response created and in progress; the message item and its text part
 * opened with the first text; the text's deltas; then, once the answer is whole and checked, the text and the message
 * done, each function call as an item of its own, and the response completed (or incomplete, cut off by
 * max_output_tokens). A failure after the stream began is an `error` event and the response failed. No `[DONE]`.
 */
function streamEvents(
  shape: ResponseShape,
  answer: Answering,
  keep: (response: ResponseObject) => Promise<void>,
): StreamEvents<ChatResult> {
  let sequence = 0;
  let messageOpen = false;
  const event = (type: string, fields: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...fields })}\n\n`;
  const part = { item_id: shape.messageId, output_index: 0, content_index: 0 };
  const openMessage = () => {
    messageOpen = true;
    return (
      event('response.output_item.added', { output_index: 0, item: shape.message('', 'in_progress') }) +
      event('response.content_part.added', { ...part, part: textPart('') })
    );
  };
  return {
    opening: () =>
      event('response.created', { response: shape.object('in_progress', []) }) +
      event('response.in_progress', { response: shape.object('in_progress', []) }),
    text: (delta) => (messageOpen ? '' : openMessage()) + event('response.output_text.delta', { ...part, delta, logprobs: [] }),
    async closing(result, sent) {
      const toolCalls = await settledToolCalls(result.toolCalls, result.finishReason, answer);
      if (!toolCalls.length) await checkStructured(sent, result.finishReason, answer);
      const response = shape.finished(result, messageOpen || !toolCalls.length ? sent : null, toolCalls);
      const hasMessage = response.output[0]?.type === 'message';
      let events = '';
      if (hasMessage) {
        if (!messageOpen) events += openMessage();
        events +=
          event('response.output_text.done', { ...part, text: sent, logprobs: [] }) +
          event('response.content_part.done', { ...part, part: textPart(sent) }) +
          event('response.output_item.done', { output_index: 0, item: response.output[0] });
      }
      const first = hasMessage ? 1 : 0;
      response.output.slice(first).forEach((item, i) => {
        const at = { output_index: first + i };
        events +=
          event('response.output_item.added', { ...at, item: { ...item, arguments: '', status: 'in_progress' } }) +
          event('response.function_call_arguments.delta', { ...at, item_id: item.id, delta: item.arguments }) +
          event('response.function_call_arguments.done', { ...at, item_id: item.id, name: item.name, arguments: item.arguments }) +
          event('response.output_item.done', { ...at, item });
      });
      await keep(response);
      return events + event(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
    },
    error: (error) =>
      event('error', { code: error.code, message: error.message, param: error.param }) +
      event('response.failed', { response: shape.object('failed', [], { error: { code: error.code, message: error.message } }) }),
    done: null,
  };
}
