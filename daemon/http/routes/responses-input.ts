// A Responses API request as a chat call: what is refused by name, the input items as the conversation's items (with
// their ids, as they are stored and listed), and the chat request the engine runs. The scrub stage has already
// scrubbed every text here (scrub/requests.ts, `responses`), joining each content list's text parts into one.
import { randomBytes } from 'node:crypto';
import type { ChatMessage, ChatRequest, ToolDefinition } from '../../engines/index.js';
import { ApiError } from '../../errors/index.js';
import type { ResponseStore, StoredItem } from '../../responses/index.js';
import { refuseToolChoiceWithoutTools } from '../answers.js';

export interface ContentPart {
  type: string;
  text?: string;
  refusal?: string;
}

export interface InputItem {
  type?: string;
  id?: string;
  role?: string;
  content?: string | ContentPart[];
  call_id?: string;
  name?: string;
  arguments?: string;
  output?: string | ContentPart[];
}

export interface ResponsesTool {
  type: string;
  name?: string;
  description?: string | null;
  parameters?: Record<string, unknown> | null;
  strict?: boolean | null;
}

export type ResponsesFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; name?: string; schema?: Record<string, unknown>; strict?: boolean | null; description?: string };

export interface ResponsesBody {
  model: string;
  input?: string | InputItem[];
  instructions?: string | null;
  tools?: ResponsesTool[] | null;
  tool_choice?: 'none' | 'auto' | 'required' | { type: string; name?: string } | null;
  text?: { format?: ResponsesFormat | null; verbosity?: string | null } | null;
  temperature?: number | null;
  top_p?: number | null;
  max_output_tokens?: number | null;
  stream?: boolean | null;
  store?: boolean | null;
  previous_response_id?: string | null;
  metadata?: Record<string, string> | null;
  parallel_tool_calls?: boolean | null;
  truncation?: 'auto' | 'disabled' | null;
  include?: string[] | null;
  reasoning?: { effort?: string | null; summary?: string | null; generate_summary?: string | null } | null;
  background?: boolean | null;
  prompt?: unknown;
  conversation?: unknown;
  top_logprobs?: number | null;
  service_tier?: 'auto' | 'default' | 'flex' | 'priority' | null;
  user?: string;
}

/** The default ceiling on generated tokens when the client sets none, for the token limit's reservation. */
export const DEFAULT_MAX_OUTPUT_TOKENS = 1024;

/** Ids of the items we make, in OpenAI's form: a prefix and random hex digits. */
export function itemId(prefix: 'msg' | 'fc' | 'fco'): string {
  return `${prefix}_${randomBytes(16).toString('hex')}`;
}

const refuse = (param: string, message: string): never => {
  throw new ApiError('invalid_request_error', message, { param });
};

/**
 * Fields and items that need what this deployment does not have (OpenAI's hosted tools and stores, reasoning models,
 * background runs, stored prompts, conversations) are refused by name rather than ignored; so are token probabilities,
 * which would show the model's raw tokens where scrubbing cannot reach.
 */
export function refuseUnserved(body: ResponsesBody): void {
  body.tools?.forEach((tool, i) => {
    if (tool.type !== 'function') {
      refuse(
        `tools[${i}].type`,
        `The '${tool.type}' tool is not served here: this deployment has no hosted tools (web search, file search, code interpreter, computer use, image generation, MCP). Use function tools, which your code runs.`,
      );
    }
    if (typeof tool.name !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(tool.name))
      refuse(`tools[${i}].name`, 'A function tool needs a name of 1 to 64 letters, digits, underscores or dashes.');
  });
  const choice = body.tool_choice;
  if (choice && typeof choice === 'object' && choice.type !== 'function') {
    refuse('tool_choice', `tool_choice of type '${choice.type}' is not served here: use 'none', 'auto', 'required' or a function.`);
  }
  if (body.reasoning && (body.reasoning.effort != null || body.reasoning.summary != null || body.reasoning.generate_summary != null)) {
    refuse(
      body.reasoning.effort != null ? 'reasoning.effort' : 'reasoning.summary',
      "Reasoning options are not supported: the models served here do not produce reasoning or its summaries. Leave out 'reasoning'.",
    );
  }
  if (body.background)
    refuse(
      'background',
      "Background responses are not served here: leave out 'background' (or set it false) and wait for the answer, or stream it.",
    );
  if (body.prompt != null) refuse('prompt', "Stored prompt templates are not served here: send the text as 'instructions' and 'input'.");
  if (body.conversation != null)
    refuse('conversation', "Conversations are not served here: chain responses with 'previous_response_id' instead.");
  if ((body.top_logprobs ?? 0) > 0) {
    refuse(
      'top_logprobs',
      "Token log probabilities are not offered: they would show the model's raw tokens, which personal-data scrubbing cannot cover.",
    );
  }
  for (const [i, what] of (body.include ?? []).entries()) {
    refuse(
      `include[${i}]`,
      `'${what}' cannot be included: this deployment serves none of the outputs 'include' adds (log probabilities, hosted tools' results, reasoning, images).`,
    );
  }
  if (Array.isArray(body.input)) body.input.forEach(refuseUnservedItem);
}

function refuseUnservedItem(item: InputItem, i: number): void {
  const type = item.type ?? 'message';
  const parts = (list: unknown, field: string) => {
    if (!Array.isArray(list)) return;
    (list as ContentPart[]).forEach((part, p) => {
      if (typeof part.text !== 'string' && typeof part.refusal !== 'string') {
        refuse(
          `input[${i}].${field}[${p}].type`,
          `Only text content is served here; input[${i}].${field}[${p}] is '${part.type}' (images, files and audio are not). Send text parts ('input_text').`,
        );
      }
    });
  };
  switch (type) {
    case 'message':
      if (!['user', 'assistant', 'system', 'developer'].includes(item.role ?? '')) {
        refuse(`input[${i}].role`, `input[${i}] is a message whose role must be 'user', 'assistant', 'system' or 'developer'.`);
      }
      if (typeof item.content !== 'string' && !Array.isArray(item.content)) refuse(`input[${i}].content`, `input[${i}] needs 'content'.`);
      parts(item.content, 'content');
      return;
    case 'function_call':
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string' || typeof item.arguments !== 'string') {
        refuse(`input[${i}]`, `input[${i}] is a function_call, which needs 'call_id', 'name' and 'arguments' (strings).`);
      }
      try {
        JSON.parse(item.arguments!);
      } catch {
        refuse(`input[${i}].arguments`, `input[${i}].arguments is not valid JSON: send the arguments as the model wrote them.`);
      }
      return;
    case 'function_call_output':
      if (typeof item.call_id !== 'string' || (typeof item.output !== 'string' && !Array.isArray(item.output))) {
        refuse(`input[${i}]`, `input[${i}] is a function_call_output, which needs 'call_id' and 'output'.`);
      }
      parts(item.output, 'output');
      return;
    case 'item_reference':
      if (typeof item.id !== 'string') refuse(`input[${i}].id`, `input[${i}] is an item_reference, which needs the item's 'id'.`);
      return;
    default:
      refuse(
        `input[${i}].type`,
        `input[${i}] is a '${type}' item, which is not served here: send messages, function calls and their outputs.`,
      );
  }
}

/** Text of content that the scrub stage has joined (one part, or a string). */
function textOf(content: string | ContentPart[] | undefined): string {
  if (typeof content === 'string') return content;
  return (content ?? []).map((p) => p.text ?? p.refusal ?? '').join('');
}

/**
 * The request's input as items of the conversation, each with an id, as they are stored and listed: a string input is
 * one user message; an item_reference is the project's stored item it names.
 */
export function inputItems(body: ResponsesBody, store: ResponseStore, project: string): StoredItem[] {
  const input = body.input ?? [];
  if (typeof input === 'string') return [message('user', input)];
  return input.map((item, i) => {
    switch (item.type ?? 'message') {
      case 'function_call':
        return {
          type: 'function_call',
          id: itemId('fc'),
          call_id: item.call_id!,
          name: item.name!,
          arguments: item.arguments!,
          status: 'completed',
        };
      case 'function_call_output':
        return {
          type: 'function_call_output',
          id: itemId('fco'),
          call_id: item.call_id!,
          output: textOf(item.output),
          status: 'completed',
        };
      case 'item_reference': {
        const stored = store.item(project, item.id!);
        if (!stored) {
          refuse(
            `input[${i}].id`,
            `input[${i}] refers to the item '${item.id}', which is not stored for this project (it may have expired or been deleted).`,
          );
        }
        return { ...stored!, id: itemId(stored!.type === 'message' ? 'msg' : stored!.type === 'function_call' ? 'fc' : 'fco') };
      }
      default:
        return message(item.role as ChatMessage['role'], textOf(item.content));
    }
  });
}

/**
 * Every function call output in the input answers a call made before it, in the conversation it continues or in the
 * input itself (OpenAI refuses the others too).
 */
export function refuseUnansweredOutputs(context: StoredItem[], input: StoredItem[]): void {
  const called = new Set(context.filter((item) => item.type === 'function_call').map((item) => item.call_id));
  input.forEach((item, i) => {
    if (item.type === 'function_call') called.add(item.call_id);
    else if (item.type === 'function_call_output' && !called.has(item.call_id)) {
      refuse(
        `input[${i}].call_id`,
        `input[${i}] is the output of the call '${String(item.call_id)}', which no function_call before it made (in this input or the conversation it continues).`,
      );
    }
  });
}

/** The engine names chat's fields when it refuses a request; these are the Responses API's fields they come from. */
const CHAT_FIELDS: Array<[RegExp, (match: RegExpExecArray) => string]> = [
  [/^messages$/, () => 'input'],
  [/^response_format\.json_schema\.schema$/, () => 'text.format.schema'],
  [/^tools\[(\d+)\]\.function\.parameters$/, (match) => `tools[${match[1]}].parameters`],
];

/** An engine's refusal of the chat call a Responses request became, naming the field of the request the client sent. */
export function asResponsesError(err: unknown): unknown {
  if (!(err instanceof ApiError) || err.param === null) return err;
  for (const [chat, responses] of CHAT_FIELDS) {
    const match = chat.exec(err.param);
    if (!match) continue;
    const param = responses(match);
    const message = err.message.replaceAll(`'${err.param}'`, `'${param}'`);
    return new ApiError(err.code, message, { param, headers: err.headers, type: err.type, expected: err.expected });
  }
  return err;
}

function message(role: string, text: string): StoredItem {
  const assistant = role === 'assistant';
  return {
    type: 'message',
    id: itemId('msg'),
    role,
    status: 'completed',
    content: [assistant ? { type: 'output_text', text, annotations: [] } : { type: 'input_text', text }],
  };
}

/**
 * The conversation as chat messages: the instructions first (only this request's: a previous response's are not
 * carried over), then every item in order. A function call joins the assistant message before it, so calls made in
 * one turn are one assistant message, as the model made them.
 */
export function chatMessages(instructions: string | null | undefined, items: StoredItem[]): ChatMessage[] {
  const messages: ChatMessage[] = instructions ? [{ role: 'system', content: instructions }] : [];
  for (const item of items) {
    if (item.type === 'message') {
      messages.push({ role: item.role as ChatMessage['role'], content: textOf(item.content as ContentPart[]) });
    } else if (item.type === 'function_call') {
      const call = { id: item.call_id as string, name: item.name as string, arguments: item.arguments as string };
      const last = messages.at(-1);
      if (last?.role === 'assistant') (last.toolCalls ??= []).push(call);
      else messages.push({ role: 'assistant', content: '', toolCalls: [call] });
    } else if (item.type === 'function_call_output') {
      messages.push({ role: 'tool', content: item.output as string, toolCallId: item.call_id as string });
    }
  }
  return messages;
}

/** The engine's request: the conversation, the sampling options, the tools and the answer's format. */
export function chatRequestOf(body: ResponsesBody, messages: ChatMessage[]): ChatRequest {
  if (!messages.some((m) => m.role !== 'system')) refuse('input', "Send some 'input' (or a 'previous_response_id' to continue from).");
  const request: ChatRequest = { messages };
  if (body.temperature != null) request.temperature = body.temperature;
  if (body.top_p != null) request.topP = body.top_p;
  if (body.max_output_tokens != null) request.maxTokens = body.max_output_tokens;
  const format = body.text?.format;
  if (format?.type === 'json_object') request.responseFormat = { type: 'json_object' };
  if (format?.type === 'json_schema') {
    if (!format.schema) refuse('text.format.schema', "text.format json_schema needs 'schema'.");
    request.responseFormat = { type: 'json_schema', schema: format.schema! };
  }
  const tools: ToolDefinition[] = (body.tools ?? []).map((t) => ({
    name: t.name!,
    ...(t.description ? { description: t.description } : {}),
    ...(t.parameters ? { parameters: t.parameters } : {}),
  }));
  if (tools.length) request.tools = tools;
  const choice = body.tool_choice;
  if (choice != null) request.toolChoice = typeof choice === 'string' ? choice : { name: choice.name ?? '' };
  refuseToolChoiceWithoutTools(request);
  return request;
}

/** Parameter schemas of the function tools held to them: a Responses function tool is strict unless it says not. */
export function strictTools(body: ResponsesBody): Map<string, Record<string, unknown>> {
  const strict = new Map<string, Record<string, unknown>>();
  for (const tool of body.tools ?? []) if (tool.strict !== false && tool.name) strict.set(tool.name, tool.parameters ?? { type: 'object' });
  return strict;
}

/** What the token estimate reads of the project's stored responses. */
export interface StoredForEstimate {
  conversation(id: string): StoredItem[] | null;
  item(id: string): StoredItem | null;
}

/**
 * Upper bound on a call's tokens before tokenizing: a token is at least one UTF-8 byte, so the bytes of every text the
 * model will read (plus a margin per item for the template) bound the prompt, the stored conversation it continues and
 * the items it refers to included; max_output_tokens (or 1024) bounds the answer. Neither can exceed the model's context.
 */
export function estimateTokens(raw: unknown, context: number | undefined, stored: StoredForEstimate): number {
  const body = raw as ResponsesBody;
  let bytes = Buffer.byteLength(body.instructions ?? '') + 16;
  const text = (s: unknown) => {
    if (typeof s === 'string') bytes += Buffer.byteLength(s);
    else if (Array.isArray(s)) for (const part of s as ContentPart[]) bytes += Buffer.byteLength(part.text ?? part.refusal ?? '');
  };
  const item = (i: InputItem | StoredItem) => {
    bytes += 16;
    text(i.content);
    text(i.arguments);
    text(i.output);
  };
  if (typeof body.input === 'string') text(body.input);
  else {
    for (const i of body.input ?? []) {
      const referenced = i.type === 'item_reference' && typeof i.id === 'string' ? stored.item(i.id) : null;
      item(referenced ?? i);
    }
  }
  for (const tool of body.tools ?? []) bytes += Buffer.byteLength(tool.description ?? '') + 256;
  if (body.previous_response_id) for (const i of stored.conversation(body.previous_response_id) ?? []) item(i);
  const completion = body.max_output_tokens ?? DEFAULT_MAX_OUTPUT_TOKENS;
  return context ? Math.min(bytes, context) + Math.min(completion, context) : bytes + completion;
}
