// POST /v1/chat/completions: OpenAI's shape, buffered or streamed as server-sent events.
import { createHash } from 'node:crypto';
import type { EngineRegistry } from '../../engines/index.js';
import type { Config } from '../../config/index.js';
import type { OutgoingHttpHeaders } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ChatEngine, ChatMessage, ChatRequest, ChatResult, Usage } from '../../engines/index.js';
import { ApiError } from '../../errors/index.js';
import { joinedParts, JsonPosition, noRedactions, ScrubSession, StreamScrubber, type RedactionCounts } from '../../scrub/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { AUDIT_FAILED_AFTER_STREAM, recordCall, recordStreamStart, type AuditDeps } from '../stages/audit.js';
import { abortOnDisconnect } from '../lifetime.js';
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
      const gone = abortOnDisconnect(request, reply);
      const onUsage = (u: Usage) => {
        request.call.usedTokens = u.promptTokens + u.completionTokens;
        request.call.completionTokens = u.completionTokens;
      };
      const scrubbing = answerScrubbing(deps, request);
      if (request.body.stream) {
        const record = (sha: string, status: number) => recordCall(deps, request, status, sha);
        return stream(request, reply, { engine, modelId, chatRequest, id, created, gone, onUsage, scrubbing, record });
      }

      const work = engine.chat(modelId, chatRequest, { onText: () => {}, signal: gone, onUsage });
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

/** A stream's sent events are hashed once this many bytes are waiting (and at the end). */
const HASH_EVERY = 16 * 1024;

interface StreamArgs {
  engine: ChatEngine;
  modelId: string;
  chatRequest: ChatRequest;
  id: string;
  created: number;
  /** Aborts when the client goes away. */
  gone: AbortSignal;
  onUsage: (u: { promptTokens: number; completionTokens: number }) => void;
  scrubbing: AnswerScrubbing | null;
  /** Appends the call's audit entry with the digest of what was streamed; null when the call is not audited. */
  record: (sentSha256: string, status: number) => Promise<number> | null;
}

/**
 * Streams a chat completion as server-sent events. The response commits to 200 only when the engine says the call
 * has started (it holds a place and its input checked out); until then a refusal (queue full, prompt too long) is
 * an ordinary error response with its own status and Retry-After.
 */
function stream(request: FastifyRequest<{ Body: ChatBody }>, reply: FastifyReply, args: StreamArgs): Promise<FastifyReply> {
  const { engine, modelId, chatRequest, id, created, gone, onUsage, scrubbing, record } = args;
  // The events are written straight to the response once its head is out (start(), below), not through a stream that
  // fastify pipes to it: the pipe's listeners, end-of-stream watchers and ticks were about 5% of a streamed call's
  // instructions. Nothing is written once the client has gone.
  let res: FastifyReply['raw'] | null = null;
  const emit = (bytes: Buffer) => {
    if (res && !res.destroyed && !res.writableEnded) res.write(bytes);
  };
  // What was sent, for the audit entry's response digest: the bytes each batch went out as (a string handed to the
  // hash is encoded to UTF-8 a second time), 16 KB at a time and at the end (one native call per turn cost more than
  // the hashing itself). Once the digest is taken, what follows (the leaf's comment, [DONE]) is not in it.
  const sent = createHash('sha256');
  let unhashed: Buffer[] = [];
  let unhashedBytes = 0;
  let digested = false;
  const hashSent = () => {
    if (unhashed.length) sent.update(unhashed.length === 1 ? unhashed[0]! : Buffer.concat(unhashed, unhashedBytes));
    unhashed = [];
    unhashedBytes = 0;
  };
  // Events made in the same turn (an upstream's pieces often arrive together) leave in one socket write, so one TLS
  // record and one syscall carry them, not one each; nothing waits beyond the current turn. Once the engine is done,
  // the last events wait for the audit entry and leave with [DONE] and the response's end, in one write.
  let batch = '';
  /** Set once the engine is done: events made from then on wait in `held` for the audit entry. */
  let holding = false;
  let held = '';
  const flush = () => {
    if (!batch) return;
    const bytes = Buffer.from(batch);
    batch = '';
    if (!digested) {
      unhashed.push(bytes);
      unhashedBytes += bytes.length;
      if (unhashedBytes >= HASH_EVERY) hashSent();
    }
    emit(bytes);
  };
  // The first events (the role chunk, made when the engine starts) wait for the end of the event loop's turn, not
  // just the current task: an upstream's first pieces usually arrive with its headers, and then leave with them.
  let schedule: (flush: () => void) => void = (f) => setImmediate(f);
  const send = (text: string) => {
    if (holding) held += text;
    else {
      if (!batch) schedule(flush);
      batch += text;
    }
  };
  /**
   * An event of the answer: in the digest (send() alone is for what follows it). Once the digest is taken the answer is
   * over, and an event an engine would still make is not sent: the client must get nothing the audit entry lacks.
   */
  const write = (event: string) => {
    if (!digested) send(event);
  };
  // Every chunk's JSON starts the same way; only its choices differ.
  const chunkStart = `data: {"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(modelId)},"choices":`;
  const chunk = (choices: unknown[]) => write(`${chunkStart}${JSON.stringify(choices)}}\n\n`);
  /** The events made once the engine was done (`held`), encoded once: hashed when the answer ends, sent last. */
  let last: Buffer | null = null;
  // The entry is on disk before [DONE]; its leaf is named in an SSE comment, which clients ignore. A stream that
  // ended in an error event is recorded with that error's status (the HTTP status line said 200).
  const finish = async (status = 200) => {
    holding = true;
    // This turn's events leave now, as their scheduled flush would have sent them (it will find nothing left).
    flush();
    if (held) {
      last = Buffer.from(held);
      held = '';
      unhashed.push(last);
      unhashedBytes += last.length;
    }
    hashSent();
    digested = true;
    try {
      const leaf = await record(sent.digest('hex'), status);
      if (leaf !== null) send(`: x-audit-leaf ${leaf}\n\n`);
    } catch (err) {
      request.log.error({ err: (err as Error).message }, 'the audit log could not record a call');
      send(`data: ${JSON.stringify(AUDIT_FAILED_AFTER_STREAM.toBody())}\n\n`);
    }
    send('data: [DONE]\n\n');
    endResponse();
  };
  // The last events and the chunked encoding's terminator in one socket write: the response is corked until its
  // end() (which uncorks it fully). Only once its headers are out, when nothing waits for a drain and the events fit
  // under the socket's high-water mark (at most 3 bytes per UTF-16 unit, plus the chunk's framing): a write past it
  // would wait for a drain that a corked socket never has.
  const endResponse = () => {
    batch += held;
    held = '';
    if (!res || res.destroyed || res.writableEnded) return;
    const socket = res.socket;
    const bytes = (last?.length ?? 0) + 3 * batch.length + 64;
    const fits = socket !== null && socket.writableLength + bytes < socket.writableHighWaterMark;
    if (fits && res.headersSent && !res.writableNeedDrain) res.cork();
    if (last) emit(last);
    flush();
    res.end();
  };
  const contentChunk = (content: string) => {
    if (scrubbing?.schema) structured += content;
    if (content)
      write(`${chunkStart}[{"index":0,"delta":{"content":${JSON.stringify(content)}},"logprobs":null,"finish_reason":null}]}\n\n`);
  };
  // Text that might be the start of a value is held back until the next pieces settle it (never the whole answer).
  const scrubber = scrubbing ? new StreamScrubber(scrubbing.session, scrubbing.tally, scrubbing.json ?? undefined) : null;
  // A structured answer whose placeholders took numbers' places is checked against its schema once it is whole.
  let structured = '';
  // If scrubbing the answer fails, generation stops and nothing more of the answer is sent.
  let scrubFailure: Error | null = null;
  // Generation stops when the client goes or scrubbing fails: one controller fed by the other's event (AbortSignal.any
  // would hold its sources through weak references for every call).
  const stopGenerating = new AbortController();
  if (gone.aborted) stopGenerating.abort(gone.reason);
  else gone.addEventListener('abort', () => stopGenerating.abort(gone.reason), { once: true });
  const scrubbed = (step: () => string) => {
    try {
      contentChunk(step());
    } catch (err) {
      scrubFailure = err instanceof Error ? err : new Error(String(err));
      stopGenerating.abort();
    }
  };
  // The pieces an engine hands on in one turn (an upstream's events often come several to a read) are scrubbed and
  // sent as one: one pass of the streaming scrubber over them and one event, not one each. Nothing waits beyond the
  // turn: they go at its end, with the events already made in it.
  let pending = '';
  const passPending = () => {
    const text = pending;
    pending = '';
    if (!text || scrubFailure) return;
    if (!scrubber) contentChunk(text);
    else scrubbed(() => scrubber.push(text));
  };
  const passOn = (text: string) => {
    if (scrubFailure) return;
    if (!pending) queueMicrotask(passPending);
    pending += text;
  };

  return new Promise((resolve, reject) => {
    let started = false;
    const start = () => {
      if (started) return;
      started = true;
      write(`${chunkStart}[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`);
      schedule = queueMicrotask;
      // The response is taken over from fastify with every header the stages set on the reply. Its onSend hooks do not
      // run for it; both of the daemon's leave streams alone (the audit stage records a stream here, at its end, and a
      // stream only starts once the request's body has been read). Its onResponse hooks still run when it finishes.
      reply.type('text/event-stream; charset=utf-8').header('cache-control', 'no-cache').hijack();
      res = reply.raw;
      res.writeHead(200, reply.getHeaders() as OutgoingHttpHeaders);
      resolve(reply);
    };
    const work = engine
      .chat(modelId, chatRequest, {
        onStart: start,
        stream: true,
        onText: (text) => {
          start();
          passOn(text);
        },
        signal: stopGenerating.signal,
        onUsage,
      })
      .then(async (result) => {
        // Any piece still pending goes first (its microtask was queued before this callback, so this is a guard).
        passPending();
        // Set first: for an engine that never said it started, the role chunk waits with the rest.
        holding = true;
        start();
        if (scrubber && !scrubFailure) scrubbed(() => scrubber.end());
        if (scrubFailure) throw scrubFailure;
        if (scrubbing) await checkStructured(structured, scrubbing);
        let toolCalls: ChatResult['toolCalls'];
        try {
          toolCalls = scrubToolCalls(result.toolCalls, scrubbing);
        } catch (err) {
          throw (scrubFailure = err instanceof Error ? err : new Error(String(err)));
        }
        if (toolCalls.length) {
          chunk([
            {
              index: 0,
              delta: {
                tool_calls: toolCalls.map((c, i) => ({
                  index: i,
                  id: c.id,
                  type: 'function',
                  function: { name: c.name, arguments: c.arguments },
                })),
              },
              logprobs: null,
              finish_reason: null,
            },
          ]);
        }
        write(`${chunkStart}[{"index":0,"delta":{},"logprobs":null,"finish_reason":${JSON.stringify(result.finishReason)}}]}\n\n`);
        if (request.body.stream_options?.include_usage) write(`${chunkStart}[],"usage":${JSON.stringify(usageObject(result))}}\n\n`);
        return finish();
      })
      .catch((err: unknown) => {
        if (!started) {
          reject(err instanceof Error ? err : new Error(String(err)));
          return;
        }
        // What was made before the failure is sent before its error event, as it would have been at its turn's end,
        // and so is what the scrubber held back: nothing more will come to change how it is judged.
        passPending();
        if (scrubber && !scrubFailure) scrubbed(() => scrubber.end());
        holding = true;
        if (scrubFailure && !gone.aborted) {
          // The message names no value; the answer's remaining text is dropped.
          request.log.error({ err: scrubFailure.message }, 'scrubbing the answer failed');
          const error = new ApiError(
            'internal_error',
            'Scrubbing the answer failed, so the rest of it was withheld. Retry; if it persists, report the X-Request-Id.',
          );
          write(`data: ${JSON.stringify(error.toBody())}\n\n`);
          return finish(error.status);
        } else if (!gone.aborted) {
          const error =
            err instanceof ApiError ? err : new ApiError('internal_error', 'The engine failed while generating. Retry the request.');
          if (!(err instanceof ApiError)) request.log.error({ err }, 'chat stream failed');
          write(`data: ${JSON.stringify(error.toBody())}\n\n`);
          return finish(error.status);
        }
        return finish();
      });
    startedEngineWork(request.call, request.call.model!, work);
  });
}
