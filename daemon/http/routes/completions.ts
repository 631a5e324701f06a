// POST /v1/completions: OpenAI's legacy text completion (what editors' autocompletion plugins call), buffered or
// streamed. The model continues the prompt with no chat template; with `suffix`, it fills in between (code models whose
// GGUF declares fill-in-the-middle tokens). Several prompts are completed one after another, one choice each.
import type { FastifyInstance } from 'fastify';
import type { Config } from '../../config/index.js';
import type { CompletionRequest, CompletionResult, EngineRegistry, Usage } from '../../engines/index.js';
import { ApiError } from '../../errors/index.js';
import { startedEngineWork, type RouteDeclaration } from '../context.js';
import { recordCall, recordStreamStart, type AuditDeps } from '../stages/audit.js';
import { abortOnDisconnect } from '../lifetime.js';
import { answering, chatEngineFor, settledContent, streamAnswer, usageRecorder, type StreamEvents } from '../answers.js';
import { noteWait, ticketFor, type TicketDeps } from '../tickets.js';
import { completionBody } from './schemas.js';

export interface CompletionsRouteDeps extends AuditDeps, TicketDeps {
  config: Config;
  engines: EngineRegistry;
}

interface CompletionBody {
  model: string;
  prompt: string | string[] | number[] | number[][];
  suffix?: string | null;
  max_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  stop?: string | string[] | null;
  seed?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean } | null;
  echo?: boolean | null;
  logprobs?: number | null;
  service_tier?: 'auto' | 'default' | 'flex' | 'priority' | null;
}

/** OpenAI's default for this endpoint. */
const DEFAULT_MAX_TOKENS = 16;

/** The prompts as texts; token arrays are refused (they could not be scrubbed as the model would read them). */
function promptsOf(body: CompletionBody): string[] {
  const prompt = body.prompt;
  if (typeof prompt === 'string') return [prompt];
  if (prompt.every((p): p is string => typeof p === 'string')) return prompt;
  throw new ApiError('invalid_request_error', "'prompt' as tokens is not supported: send the text (a string, or an array of strings).", {
    param: 'prompt',
  });
}

function estimateTokens(raw: unknown, context: number | undefined): number {
  const body = raw as CompletionBody;
  // Token prompts are refused by the route; until then they count for nothing more than their length.
  const prompts: unknown[] = typeof body.prompt === 'string' ? [body.prompt] : body.prompt;
  const completion = body.max_tokens ?? DEFAULT_MAX_TOKENS;
  let total = 0;
  for (const prompt of prompts) {
    const bytes = (typeof prompt === 'string' ? Buffer.byteLength(prompt) : 1) + Buffer.byteLength(body.suffix ?? '') + 8;
    total += context ? Math.min(bytes, context) + Math.min(completion, context) : bytes + completion;
  }
  return total;
}

function engineRequest(body: CompletionBody, prompt: string): CompletionRequest {
  const request: CompletionRequest = { prompt, maxTokens: body.max_tokens ?? DEFAULT_MAX_TOKENS };
  if (body.suffix != null) request.suffix = body.suffix;
  if (body.temperature != null) request.temperature = body.temperature;
  if (body.top_p != null) request.topP = body.top_p;
  if (body.stop != null) request.stop = typeof body.stop === 'string' ? [body.stop] : body.stop;
  if (body.seed != null) request.seed = body.seed;
  return request;
}

function usageObject(usage: Usage) {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

export function registerCompletionsRoute(v1: FastifyInstance, deps: CompletionsRouteDeps): void {
  const declaration: RouteDeclaration = { auth: true, capability: 'chat', tokens: estimateTokens, scrub: 'completion' };
  v1.post<{ Body: CompletionBody }>(
    '/completions',
    { schema: { body: completionBody }, config: { declaration } },
    async (request, reply) => {
      const body = request.body;
      if (body.logprobs != null) {
        throw new ApiError(
          'invalid_request_error',
          "Token log probabilities are not offered: they would show the model's raw tokens, which personal-data scrubbing cannot cover. Leave out 'logprobs'.",
          { param: 'logprobs' },
        );
      }
      const prompts = promptsOf(body);
      if (body.stream && prompts.length > 1) {
        throw new ApiError(
          'invalid_request_error',
          'A streamed completion takes one prompt. Send the prompts in calls of their own, or leave out stream.',
          {
            param: 'prompt',
          },
        );
      }
      const { engine, modelId } = chatEngineFor(deps.engines, request);
      if (body.stream) await recordStreamStart(deps, request, reply);
      const id = `cmpl-${request.id}`;
      const created = Math.floor(Date.now() / 1000);
      const answer = answering(deps.config, request, { json: false, schema: null, lengthParam: 'max_tokens' });
      const echo = body.echo === true;
      const ticket = ticketFor(deps, request, body.service_tier);

      if (body.stream) {
        const prompt = prompts[0]!;
        return streamAnswer<CompletionResult>(request, reply, {
          run: (options) => engine.complete(modelId, engineRequest(body, prompt), options),
          events: chunkEvents(id, created, modelId, body.stream_options?.include_usage === true, echo ? prompt : ''),
          answer,
          onUsage: usageRecorder(request),
          ticket,
          record: (sha, status) => recordCall(deps, request, status, sha),
        });
      }

      // Tokens of every prompt's call, for the call's usage and its token limit.
      const used: Usage = { promptTokens: 0, completionTokens: 0 };
      const record = usageRecorder(request);
      const signal = abortOnDisconnect(request, reply);
      const choices = [];
      for (const [index, prompt] of prompts.entries()) {
        let last: Usage = { promptTokens: 0, completionTokens: 0 };
        const work = engine.complete(modelId, engineRequest(body, prompt), {
          onText: () => {},
          signal,
          onUsage: (u) => {
            last = u;
            record({ promptTokens: used.promptTokens + u.promptTokens, completionTokens: used.completionTokens + u.completionTokens });
          },
          ticket,
        });
        startedEngineWork(request.call, request.call.model!, work);
        const result = await work.finally(() => {
          used.promptTokens += last.promptTokens;
          used.completionTokens += last.completionTokens;
        });
        const text = await settledContent(result.text, result.finishReason, answer);
        choices.push({ text: echo ? prompt + text : text, index, logprobs: null, finish_reason: result.finishReason });
      }
      noteWait(reply, ticket);
      return { id, object: 'text_completion', created, model: modelId, choices, usage: usageObject(used) };
    },
  );
}

/** The stream's events: text_completion chunks, and `[DONE]`. */
function chunkEvents(id: string, created: number, modelId: string, includeUsage: boolean, echoed: string): StreamEvents<CompletionResult> {
  const chunk = (choices: unknown[], extra?: { usage: ReturnType<typeof usageObject> }) =>
    `data: ${JSON.stringify({ id, object: 'text_completion', created, model: modelId, choices, ...extra })}\n\n`;
  const choice = (text: string, finishReason: CompletionResult['finishReason'] | null = null) => [
    { text, index: 0, logprobs: null, finish_reason: finishReason },
  ];
  return {
    // With echo, the prompt (as scrubbed) comes first.
    opening: () => (echoed ? chunk(choice(echoed)) : ''),
    text: (text) => chunk(choice(text)),
    closing(result) {
      return chunk(choice('', result.finishReason)) + (includeUsage ? chunk([], { usage: usageObject(result.usage) }) : '');
    },
    error: (error) => `data: ${JSON.stringify(error.toBody())}\n\n`,
    done: 'data: [DONE]\n\n',
  };
}
