// What each route's request sends to a model, scrubbed in place through the request's one session: every string an
// engine is given is scrubbed as the engine will see it, or the call is refused with a 400 that names the field
// (docs/scrubbing.md lists them). Names (a message's author, a function's) are refused rather than scrubbed: a
// placeholder's brackets make no valid name, and a name that holds an ID is a mistake worth hearing about. These run on
// the event loop for most calls and in a worker thread for large bodies (offload.ts), so they depend on nothing but
// the scrubber and the error registry.
import { ApiError } from '../errors/index.js';
import type { RedactionType } from './detect.js';
import type { ScrubSession } from './session.js';

export type BodyKind = 'chat' | 'completion' | 'responses' | 'embeddings' | 'document' | 'query' | 'image' | 'transcription' | 'preview';

/** Deepest nesting of a JSON schema or tool parameters (real ones have a handful of levels). */
export const MAX_SCHEMA_DEPTH = 64;
/** Deepest nesting of a document's metadata. */
export const MAX_METADATA_DEPTH = 8;

const TYPE_NAMES: Record<RedactionType, string> = {
  NATIONAL_ID: 'a national ID',
  IQAMA: 'an Iqama number',
  IBAN: 'an IBAN',
  CARD: 'a card number',
};

/** Refuses a field that must not be changed (a name) when it holds a value. */
function refuseValues(session: ScrubSession, text: string, param: string, why: string): void {
  const found = session.find(text)[0];
  if (!found) return;
  throw new ApiError('invalid_request_error', `${param} holds what looks like ${TYPE_NAMES[found.type]}; ${why}`, { param });
}

const NAME_SENT = 'names are sent to the model and cannot be scrubbed. Use a name without personal data.';

/**
 * Every string in a JSON schema (tool parameters, a structured answer's schema), scrubbed: values, property names,
 * enum members and defaults; numbers whose digits make a value become its placeholder (the model reads the schema as
 * text). A `pattern` (or a `patternProperties` name) that holds a value is refused: a placeholder would change what it
 * matches. Nesting deeper than MAX_SCHEMA_DEPTH is refused before anything walks it.
 */
/** A number whose digits make a value: its placeholder (a string); any other number as it is. */
function scrubNumber(session: ScrubSession, value: number): number | string {
  const digits = String(value);
  const scrubbed = session.scrub(digits);
  return scrubbed === digits ? value : scrubbed;
}

function scrubSchema(session: ScrubSession, value: unknown, param: string, depth = 0): unknown {
  if (typeof value === 'string') return session.scrub(value);
  if (typeof value === 'number') return scrubNumber(session, value);
  if (value === null || typeof value !== 'object') return value;
  if (depth >= MAX_SCHEMA_DEPTH) {
    throw new ApiError('invalid_request_error', `${param} is nested more than ${MAX_SCHEMA_DEPTH} levels deep; flatten it.`, { param });
  }
  if (Array.isArray(value)) return value.map((v, i) => scrubSchema(session, v, `${param}[${i}]`, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    const at = `${param}.${key}`;
    if (key === 'pattern' && typeof v === 'string') refuseValues(session, v, at, 'a placeholder would change what the pattern matches.');
    if (param.endsWith('.patternProperties')) refuseValues(session, key, at, 'a placeholder would change what the pattern matches.');
    out[session.scrub(key)] = scrubSchema(session, v, at, depth + 1);
  }
  return out;
}

interface ChatBody {
  messages: Array<{
    content?: string | Array<{ type: string; text?: string }> | null;
    name?: string;
    tool_call_id?: string;
    tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>;
  }>;
  stop?: string | string[] | null;
  response_format?: { type: string; json_schema?: { schema?: Record<string, unknown> } };
  tools?: Array<{ function: { name: string; description?: string; parameters?: Record<string, unknown> } }>;
  tool_choice?: string | { function: { name: string } };
}

/** A message's content parts as the model sees them: joined, one text (only text parts are served). */
export function joinedParts(parts: Array<{ type: string; text?: string }>, index: number): string {
  return parts
    .map((part, p) => {
      if (part.type !== 'text' || typeof part.text !== 'string') {
        throw new ApiError(
          'invalid_request_error',
          `Only text content parts are supported; messages[${index}].content[${p}] is '${part.type}'.`,
          {
            param: `messages[${index}].content[${p}].type`,
          },
        );
      }
      return part.text;
    })
    .join('');
}

/**
 * Chat: every message's content (parts joined first, so a value cut across two parts is still one value), tool-call
 * ids and arguments (as JSON), tool results' ids; stop sequences; tools' descriptions and parameter schemas; the
 * structured answer's schema. Names are refused when they hold a value.
 */
function scrubChat(raw: unknown, session: ScrubSession): void {
  const body = raw as ChatBody;
  body.messages.forEach((m, i) => {
    if (Array.isArray(m.content)) m.content = joinedParts(m.content, i);
    if (typeof m.content === 'string') m.content = session.scrub(m.content);
    if (typeof m.name === 'string') refuseValues(session, m.name, `messages[${i}].name`, NAME_SENT);
    if (typeof m.tool_call_id === 'string') m.tool_call_id = session.scrub(m.tool_call_id);
    m.tool_calls?.forEach((call, c) => {
      call.id = session.scrub(call.id);
      refuseValues(session, call.function.name, `messages[${i}].tool_calls[${c}].function.name`, NAME_SENT);
      call.function.arguments = session.scrubJson(call.function.arguments);
    });
  });
  if (typeof body.stop === 'string') body.stop = session.scrub(body.stop);
  else if (Array.isArray(body.stop)) body.stop = body.stop.map((s) => session.scrub(s));
  body.tools?.forEach((tool, k) => {
    const fn = tool.function;
    refuseValues(session, fn.name, `tools[${k}].function.name`, NAME_SENT);
    if (typeof fn.description === 'string') fn.description = session.scrub(fn.description);
    if (fn.parameters !== undefined) {
      fn.parameters = scrubSchema(session, fn.parameters, `tools[${k}].function.parameters`) as Record<string, unknown>;
    }
  });
  if (typeof body.tool_choice === 'object') refuseValues(session, body.tool_choice.function.name, 'tool_choice.function.name', NAME_SENT);
  const format = body.response_format?.json_schema;
  if (format?.schema !== undefined) {
    format.schema = scrubSchema(session, format.schema, 'response_format.json_schema.schema') as Record<string, unknown>;
  }
}

/** A Responses API content part: only text is served (the route refuses the others by name). */
interface ResponsesPart {
  type: string;
  text?: string;
  refusal?: string;
}

interface ResponsesItem {
  type?: string;
  role?: string;
  content?: string | ResponsesPart[];
  call_id?: string;
  name?: string;
  arguments?: string;
  output?: string | ResponsesPart[];
}

interface ResponsesBody {
  instructions?: string | null;
  input?: string | ResponsesItem[];
  tools?: Array<{ type?: string; name?: string; description?: string | null; parameters?: Record<string, unknown> | null }>;
  tool_choice?: string | { type?: string; name?: string };
  text?: { format?: { type?: string; name?: string; description?: string; schema?: Record<string, unknown> } };
  metadata?: Record<string, unknown> | null;
  user?: string;
}

/**
 * A Responses API content list as the model reads it: its text parts joined, one text (so that a value cut across two
 * parts is still one value). Other parts are left for the route to refuse.
 */
function responsesText(parts: ResponsesPart[]): string | null {
  if (!parts.every((p) => typeof p.text === 'string' || typeof p.refusal === 'string')) return null;
  return parts.map((p) => p.text ?? p.refusal).join('');
}

/**
 * Responses: the instructions; every input item's text (a message's content, parts joined; a function call's id and
 * arguments, as JSON; a function call output's id and output); function tools' descriptions and parameter schemas; the
 * text format's schema; the text format's name and description and the metadata, kept with a stored response. Names
 * are refused when they hold a value.
 */
function scrubResponses(raw: unknown, session: ScrubSession): void {
  const body = raw as ResponsesBody;
  if (typeof body.instructions === 'string') body.instructions = session.scrub(body.instructions);
  if (typeof body.input === 'string') body.input = session.scrub(body.input);
  else if (Array.isArray(body.input)) {
    body.input.forEach((item, i) => {
      if (typeof item.content === 'string') item.content = session.scrub(item.content);
      else if (Array.isArray(item.content)) {
        const text = responsesText(item.content);
        if (text !== null) item.content = [{ type: item.role === 'assistant' ? 'output_text' : 'input_text', text: session.scrub(text) }];
      }
      if (typeof item.call_id === 'string') item.call_id = session.scrub(item.call_id);
      if (typeof item.name === 'string') refuseValues(session, item.name, `input[${i}].name`, NAME_SENT);
      if (typeof item.arguments === 'string') item.arguments = session.scrubJson(item.arguments);
      if (typeof item.output === 'string') item.output = session.scrub(item.output);
      else if (Array.isArray(item.output)) {
        const text = responsesText(item.output);
        if (text !== null) item.output = session.scrub(text);
      }
    });
  }
  body.tools?.forEach((tool, k) => {
    if (typeof tool.name === 'string') refuseValues(session, tool.name, `tools[${k}].name`, NAME_SENT);
    if (typeof tool.description === 'string') tool.description = session.scrub(tool.description);
    if (tool.parameters) tool.parameters = scrubSchema(session, tool.parameters, `tools[${k}].parameters`) as Record<string, unknown>;
  });
  if (typeof body.tool_choice === 'object' && typeof body.tool_choice.name === 'string')
    refuseValues(session, body.tool_choice.name, 'tool_choice.name', NAME_SENT);
  const format = body.text?.format;
  if (format?.schema !== undefined) format.schema = scrubSchema(session, format.schema, 'text.format.schema') as Record<string, unknown>;
  // Not sent to a model, but stored with the response and answered back.
  if (typeof format?.name === 'string') format.name = session.scrub(format.name);
  if (typeof format?.description === 'string') format.description = session.scrub(format.description);
  if (body.metadata) {
    body.metadata = Object.fromEntries(
      Object.entries(body.metadata).map(([k, v]) => [session.scrub(k), typeof v === 'string' ? session.scrub(v) : v]),
    );
  }
  if (typeof body.user === 'string') body.user = session.scrub(body.user);
}

interface CompletionBody {
  prompt: string | unknown[];
  suffix?: string | null;
  stop?: string | string[] | null;
}

/** A text completion: the prompt (each, when several), the suffix and the stop sequences. Token prompts are the route's to refuse. */
function scrubCompletion(raw: unknown, session: ScrubSession): void {
  const body = raw as CompletionBody;
  if (typeof body.prompt === 'string') body.prompt = session.scrub(body.prompt);
  else body.prompt = body.prompt.map((p) => (typeof p === 'string' ? session.scrub(p) : p));
  if (typeof body.suffix === 'string') body.suffix = session.scrub(body.suffix);
  if (typeof body.stop === 'string') body.stop = session.scrub(body.stop);
  else if (Array.isArray(body.stop)) body.stop = body.stop.map((s) => session.scrub(s));
}

interface EmbeddingsBody {
  input: string | string[] | number[] | number[][];
}

/** Embeddings: string inputs. Token arrays are the route's: they must be read back into text first (the engine's). */
function scrubEmbeddings(raw: unknown, session: ScrubSession): void {
  const body = raw as EmbeddingsBody;
  if (typeof body.input === 'string') body.input = session.scrub(body.input);
  else if (body.input.length && typeof body.input[0] === 'string') body.input = (body.input as string[]).map((s) => session.scrub(s));
}

interface DocumentBody {
  knowledge_base: string;
  content: string;
  filename?: string;
  metadata?: Record<string, unknown>;
}

/**
 * A document to store: its content, filename, and every string in its metadata (names and values), and every number
 * there whose digits make a value (it becomes its placeholder); its knowledge base's name is refused when it holds a
 * value, since names are stored and listed as they are.
 */
function scrubDocument(raw: unknown, session: ScrubSession): void {
  const body = raw as DocumentBody;
  refuseValues(
    session,
    body.knowledge_base,
    'knowledge_base',
    'knowledge-base names are stored and listed as they are. Use a name without personal data.',
  );
  body.content = session.scrub(body.content);
  if (body.filename) body.filename = session.scrub(body.filename);
  const walk = (value: unknown, depth: number): unknown => {
    if (depth > MAX_METADATA_DEPTH) {
      throw new ApiError('invalid_request_error', `metadata is nested too deeply (at most ${MAX_METADATA_DEPTH} levels).`, {
        param: 'metadata',
      });
    }
    if (typeof value === 'string') return session.scrub(value);
    if (typeof value === 'number') return scrubNumber(session, value);
    if (Array.isArray(value)) return value.map((v) => walk(v, depth + 1));
    if (value && typeof value === 'object')
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [session.scrub(k), walk(v, depth + 1)]));
    return value;
  };
  if (body.metadata) body.metadata = walk(body.metadata, 0) as Record<string, unknown>;
}

/** A question to a knowledge base. */
function scrubQuery(raw: unknown, session: ScrubSession): void {
  const body = raw as { query: string };
  body.query = session.scrub(body.query);
}

/** An image's prompt, and a transcription's. */
function scrubPrompt(raw: unknown, session: ScrubSession): void {
  const body = raw as { prompt?: string };
  if (typeof body.prompt === 'string') body.prompt = session.scrub(body.prompt);
}

/** The dashboard's scrubbing preview: texts as the chat app's model would receive them. */
function scrubPreview(raw: unknown, session: ScrubSession): void {
  const body = raw as { texts: string[] };
  body.texts = body.texts.map((text) => session.scrub(text));
}

export const SCRUB_BODY: Record<BodyKind, (body: unknown, session: ScrubSession) => void> = {
  chat: scrubChat,
  completion: scrubCompletion,
  responses: scrubResponses,
  embeddings: scrubEmbeddings,
  document: scrubDocument,
  query: scrubQuery,
  image: scrubPrompt,
  transcription: scrubPrompt,
  preview: scrubPreview,
};
