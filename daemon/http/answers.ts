// What the routes that generate text share (chat completions, completions, responses): the engine serving the call's
// model, what is done to a model's answer before it leaves (scrubbed with the request's placeholders; a structured
// answer checked against its schema), and the steps of a streamed call. Each route keeps its own wire format.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/index.js';
import type { CallTicket, ChatCallOptions, ChatEngine, ChatRequest, EngineRegistry, ToolCall, Usage } from '../engines/index.js';
import { ApiError } from '../errors/index.js';
import { JsonPosition, noRedactions, ScrubSession, StreamScrubber, type RedactionCounts } from '../scrub/index.js';
import { checkAnswer, SCHEMA_CHECK_BUDGET_MS, SchemaCheckTimeout } from './answer-schema.js';
import { startedEngineWork } from './context.js';
import { clientGone } from './errors.js';
import { abortOnDisconnect } from './lifetime.js';
import { SseStream } from './sse.js';
import { noteWait } from './tickets.js';

/** The engine serving the call's model (resolved by the pipeline), or 503 while none does. */
export function chatEngineFor(engines: EngineRegistry, request: FastifyRequest): { engine: ChatEngine; modelId: string } {
  const modelId = request.call.model!.id;
  const engine = engines.get('chat', modelId);
  if (!engine)
    throw new ApiError('model_not_ready', `No engine is serving '${modelId}' right now. Retry shortly.`, {
      headers: { 'retry-after': '5' },
    });
  return { engine, modelId };
}

/** A tool_choice that asks for a call (required, or a named function) needs tools to call. */
export function refuseToolChoiceWithoutTools(request: ChatRequest): void {
  const choice = request.toolChoice;
  if (choice === undefined || choice === 'none' || choice === 'auto' || request.tools?.length) return;
  throw new ApiError(
    'invalid_request_error',
    "tool_choice asks for a tool call, but 'tools' is empty: send the tools, or leave out tool_choice.",
    {
      param: 'tool_choice',
    },
  );
}

/** Keeps the call's token counts, for its usage record and its token limit's settlement. */
export function usageRecorder(request: FastifyRequest): (usage: Usage) => void {
  return (u) => {
    request.call.usedTokens = u.promptTokens + u.completionTokens;
    request.call.completionTokens = u.completionTokens;
  };
}

/** What a structured answer is held to. */
export interface AnswerSchema {
  schema: Record<string, unknown>;
  /**
   * Strict (OpenAI's `strict: true`): the answer MUST match, or it is withheld. Otherwise it is checked only where
   * scrubbing put placeholders in the place of numbers (an answer the model made is not refused for being its own).
   */
  strict: boolean;
  /** The request field that holds the schema, for the 400 of one that cannot be read. */
  param: string;
}

/** How a model's answer is settled before it leaves. */
export interface Answering {
  /** Null when the configuration turns answer scrubbing off. */
  scrubbing: AnswerScrubbing | null;
  /** The answer's schema (json_schema), or null for text and json_object. */
  schema: AnswerSchema | null;
  /** Parameter schemas of the tools declared strict, by name: their calls' arguments MUST match. */
  strictTools: ReadonlyMap<string, Record<string, unknown>>;
  /** The request field that caps the answer's length (named when a strict answer is cut off by it). */
  lengthParam: string;
}

export interface AnswerScrubbing {
  session: ScrubSession;
  tally: RedactionCounts;
  /** Where a structured answer's JSON is, while it is scrubbed; null for text. */
  json: JsonPosition | null;
}

/**
 * The model's answer goes through the request's scrubbing session (same placeholders as the prompt) unless the
 * configuration turns answer scrubbing off; what it replaces is counted for the audit entry. A structured answer is
 * scrubbed as JSON: a value where JSON has a number becomes its placeholder as a string, so the answer still parses
 * (scrub/json.ts).
 */
export function answering(
  config: Config,
  request: FastifyRequest,
  options: { json: boolean; schema: AnswerSchema | null; strictTools?: ReadonlyMap<string, Record<string, unknown>>; lengthParam: string },
): Answering {
  let scrubbing: AnswerScrubbing | null = null;
  if (config.scrub.output) {
    const tally = noRedactions();
    request.call.outputRedactions = tally;
    scrubbing = { session: request.call.scrubSession ?? new ScrubSession(), tally, json: options.json ? new JsonPosition() : null };
  }
  return { scrubbing, schema: options.schema, strictTools: options.strictTools ?? new Map(), lengthParam: options.lengthParam };
}

/** A failure to scrub the answer: the rest of it is withheld (never sent unscrubbed). */
export class AnswerScrubFailed extends Error {
  constructor(cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause));
    this.name = 'AnswerScrubFailed';
  }
}

/**
 * Tool calls: their arguments are JSON, scrubbed as such whatever the answer's format; their ids and names are the
 * model's text too (an upstream's model chooses them), scrubbed like any text. A strict tool's arguments are checked
 * against its parameters; a call cut off by the length limit whose tool is strict, or that was cut off before its name
 * was written (so it may be a strict tool's), is withheld, as a strict answer cut off is.
 */
export async function settledToolCalls(calls: ToolCall[], finishReason: string, answer: Answering): Promise<ToolCall[]> {
  if (finishReason === 'length' && calls.some((c) => answer.strictTools.has(c.name) || (answer.strictTools.size && !c.name))) {
    throw cutOff(answer, 'call to a strict tool');
  }
  let settled = calls;
  const scrubbing = answer.scrubbing;
  if (scrubbing) {
    const { session, tally } = scrubbing;
    try {
      settled = calls.map((c) => ({
        id: session.scrub(c.id, tally),
        name: session.scrub(c.name, tally),
        arguments: session.scrubJson(c.arguments, tally),
      }));
    } catch (err) {
      throw new AnswerScrubFailed(err);
    }
  }
  for (const call of settled) {
    const parameters = answer.strictTools.get(call.name);
    if (parameters)
      await checkSchema(
        call.arguments,
        { schema: parameters, strict: true, param: 'tools' },
        `the arguments of its call to '${call.name}'`,
      );
  }
  return settled;
}

/** The buffered answer's text, scrubbed and checked against its schema. */
export async function settledContent(content: string, finishReason: string, answer: Answering): Promise<string> {
  const scrubbing = answer.scrubbing;
  let settled = content;
  if (scrubbing) {
    settled = scrubbing.json
      ? scrubbing.session.scrubJson(content, scrubbing.tally, scrubbing.json)
      : scrubbing.session.scrub(content, scrubbing.tally);
  }
  await checkStructured(settled, finishReason, answer);
  return settled;
}

/**
 * A structured answer is checked against its schema before it is sent whole (buffered) or finished (streamed): a
 * strict one always, any other where placeholders took the place of numbers (where the schema wants a number there,
 * the answer is withheld rather than sent invalid, or with the value). The check runs apart, within a time budget
 * (answer-schema.ts): the schema's patterns are the client's.
 */
export async function checkStructured(content: string, finishReason: string, answer: Answering): Promise<void> {
  const schema = answer.schema;
  if (!schema) return;
  if (schema.strict) {
    if (finishReason === 'length') throw cutOff(answer, 'structured answer');
    return checkSchema(content, schema, 'its answer');
  }
  if (answer.scrubbing?.json?.quoted) return checkSchema(content, schema, 'its answer', true);
}

/** A strict answer (or call) the length limit cut off: its JSON is not whole, so it cannot match. */
function cutOff(answer: Answering, what: string): ApiError {
  return new ApiError(
    'invalid_request_error',
    `The ${what} reached the length limit before its JSON was complete, so it was withheld. Raise '${answer.lengthParam}' (or shorten the input).`,
    { param: answer.lengthParam },
  );
}

async function checkSchema(json: string, schema: AnswerSchema, what: string, placeholders = false): Promise<void> {
  let verdict;
  try {
    verdict = await checkAnswer(schema.schema, json, schema.strict);
  } catch (err) {
    if (!(err instanceof SchemaCheckTimeout)) throw err;
    throw new ApiError(
      'invalid_request_error',
      `The model's structured answer could not be checked against your schema within ${SCHEMA_CHECK_BUDGET_MS / 1000} s, so it was withheld. Simplify the schema: a pattern such as '(a+)+' takes exponential time.`,
      { param: schema.param },
    );
  }
  if (verdict.unreadable) {
    throw new ApiError('invalid_request_error', `The JSON schema in '${schema.param}' cannot be read: ${verdict.unreadable}.`, {
      param: schema.param,
    });
  }
  if (verdict.matches) return;
  if (placeholders) {
    throw new ApiError(
      'internal_error',
      "The model's structured answer held personal data where your schema wants a number, so it was withheld. Retry, or let that field be a string.",
    );
  }
  throw new ApiError(
    'internal_error',
    `The model's structured answer does not match your schema (${what}: ${verdict.problem}), so it was withheld. Retry; if it persists, simplify the schema (the model is constrained by its types, properties, enums and lengths, not by keywords such as minimum or pattern).`,
  );
}

/** The events of one streamed answer, in a route's wire format. */
export interface StreamEvents<R> {
  /** The events that open the stream, sent when it commits to 200 (before any text). */
  opening(): string;
  /** A piece of the answer's text (scrubbed) as one event. */
  text(text: string): string;
  /**
   * The events after the text, once the engine's result is in: `sent` is the whole text that was sent. May throw an
   * ApiError (a strict answer that does not match its schema): the stream then ends with that error instead.
   */
  closing(result: R, sent: string): Promise<string> | string;
  error(error: ApiError): string;
  /** Sent last, after the audit leaf's comment: `data: [DONE]\n\n` for chat and completions, null for responses. */
  done: string | null;
}

export interface StreamedCall<R> {
  /** Starts the engine's work with the options the stream gives it. */
  run(options: ChatCallOptions): Promise<R>;
  events: StreamEvents<R>;
  answer: Answering;
  onUsage: (usage: Usage) => void;
  /** The call's place in its model's scheduler: how long it waited is said in a header when the stream commits. */
  ticket: CallTicket;
  /** Appends the call's audit entry with the digest of what was streamed; null when the call is not audited. */
  record: (sentSha256: string, status: number) => Promise<number> | null;
}

const SCRUB_FAILED = new ApiError(
  'internal_error',
  'Scrubbing the answer failed, so the rest of it was withheld. Retry; if it persists, report the X-Request-Id.',
);
const ENGINE_FAILED = new ApiError('internal_error', 'The engine failed while generating. Retry the request.');

const asError = (err: unknown) => (err instanceof Error ? err : new Error(String(err)));

/**
 * Streams an answer as server-sent events. The response commits to 200 only when the engine says the call has started
 * (it holds a place and its input checked out); until then a refusal (queue full, prompt too long) is an ordinary
 * error response with its own status and Retry-After. Long on purpose: the steps of one streamed call in the order
 * they happen, whose callbacks share the call's state; the writing itself is sse.ts's.
 */
export function streamAnswer<R>(request: FastifyRequest, reply: FastifyReply, call: StreamedCall<R>): Promise<FastifyReply> {
  const { events, answer, record } = call;
  const scrubbing = answer.scrubbing;
  // Generation stops when the client goes or scrubbing the answer fails: one signal for both.
  const stopGenerating = new AbortController();
  const signal = abortOnDisconnect(request, reply, stopGenerating);
  // What was sent of the text: a structured answer is checked whole once it is over, and a route may repeat it.
  let sent = '';
  const sse = new SseStream(reply, {
    record,
    textEvent: (text) => {
      sent += text;
      return events.text(text);
    },
    errorEvent: (error) => events.error(error),
    // Text that might be the start of a value is held back until the next pieces settle it (never the whole answer).
    scrubber: scrubbing ? new StreamScrubber(scrubbing.session, scrubbing.tally, scrubbing.json ?? undefined) : null,
    onScrubFailure: () => stopGenerating.abort(),
    done: events.done,
  });

  return new Promise((resolve, reject) => {
    let started = false;
    const start = () => {
      if (started) return;
      started = true;
      noteWait(reply, call.ticket);
      sse.open();
      sse.event(events.opening());
      resolve(reply);
    };
    const work = call
      .run({
        onStart: start,
        stream: true,
        onText: (text) => {
          start();
          sse.text(text);
        },
        signal,
        onUsage: call.onUsage,
        ticket: call.ticket,
      })
      .then(async (result) => {
        // The engine is done: the text's pending pieces go out, and the scrubber's hold-back and every event from here
        // wait for the audit entry. For an engine that never said it started (so sent no text), so do the opening events.
        sse.endText();
        start();
        if (sse.scrubFailure) throw sse.scrubFailure;
        sse.event(await events.closing(result, sent));
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
        if (clientGone(request)) return sse.finish();
        let error: ApiError;
        if (sse.scrubFailure || err instanceof AnswerScrubFailed) {
          // The message names no value; the answer's remaining text is dropped.
          request.log.error({ err: (sse.scrubFailure ?? asError(err)).message }, 'scrubbing the answer failed');
          error = SCRUB_FAILED;
        } else if (err instanceof ApiError) {
          error = err;
        } else {
          request.log.error({ err }, 'a stream failed');
          error = ENGINE_FAILED;
        }
        sse.event(events.error(error));
        return sse.finish(error.status);
      });
    startedEngineWork(request.call, request.call.model!, work);
  });
}
