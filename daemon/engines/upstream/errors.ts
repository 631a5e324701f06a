// What a client hears when an upstream fails: our error shape, our model id, and never the upstream's internals (its
// error bodies can name internal hosts or carry stack traces; its model names are its own). The upstream's name,
// the model and the status go to the log; the body never does.
import type { FastifyBaseLogger } from 'fastify';
import { ApiError } from '../../errors/index.js';
import { readBody } from './body.js';
import type { UpstreamClient, UpstreamResponse } from './client.js';

/** Which call failed: enough to name it in the log and to rewrite the upstream's message. */
export interface FailedCall {
  client: UpstreamClient;
  /** The name the upstream knows the model by. */
  upstreamModel: string;
  /** Ours. */
  modelId: string;
  log: FastifyBaseLogger;
}

function retryAfterOf(response: UpstreamResponse): string {
  const seconds = Number(response.header('retry-after'));
  return Number.isFinite(seconds) && seconds >= 1 && seconds <= 3600 ? String(Math.ceil(seconds)) : '2';
}

/**
 * URLs, IP addresses, host names with a port, and file paths: where the upstream lives and how its disks are laid out
 * is not the client's business.
 */
const ADDRESSES =
  /\b[a-z][a-z0-9+.-]*:\/\/\S+|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b|\[[0-9a-f:.]+\](?::\d+)?|(?<![\w:])[0-9a-f]{0,4}(?::[0-9a-f]{1,4})*::(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?(?![\w:])|\b(?=[a-z0-9.-]*[a-z])[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9-]+)*:\d{2,5}\b|(?<![\w.])(?:~|\.{1,2})?(?:\/[\w.@+-]+){2,}\/?/gi;

/**
 * The upstream's own message for a refused request, if it has OpenAI's shape: its model name replaced by ours, and
 * any address it names removed.
 */
function upstreamMessage(text: string, call: FailedCall): string | null {
  try {
    const message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    if (typeof message !== 'string' || !message) return null;
    return message.split(call.upstreamModel).join(call.modelId).replace(ADDRESSES, '[address]').slice(0, 500);
  } catch {
    return null;
  }
}

/** No response at all: refused connection, timeout, or the egress guard. */
export function unreachable(err: unknown, call: FailedCall, signal: AbortSignal): Error {
  if (signal.aborted) return err as Error;
  const code = (err as { code?: string }).code ?? (err as Error).name;
  call.log.warn({ upstream: call.client.name, model: call.modelId, code }, 'the upstream did not answer');
  if (code === 'UND_ERR_HEADERS_TIMEOUT') {
    return new ApiError('server_overloaded', `The server behind '${call.modelId}' did not start answering in time. Retry shortly.`, {
      headers: { 'retry-after': '5' },
    });
  }
  return new ApiError('model_not_ready', `The server behind '${call.modelId}' is not answering. Retry shortly.`, {
    headers: { 'retry-after': '5' },
  });
}

/** A response other than 200: mapped to our error shape; the upstream's details go to the log only. */
export async function refused(response: UpstreamResponse, call: FailedCall): Promise<ApiError> {
  const status = response.statusCode;
  let text = '';
  try {
    text = (await readBody(response, 64 * 1024)).toString('utf8');
  } catch {
    // The status alone decides.
  }
  const { modelId } = call;
  call.log.warn({ upstream: call.client.name, model: modelId, status }, 'the upstream refused a call');
  if (status === 400 || status === 413 || status === 422) {
    const message = upstreamMessage(text, call);
    return new ApiError(
      'invalid_request_error',
      `The server behind '${modelId}' refused the request as invalid${message ? `: ${message}` : '.'} Change the request and retry.`,
    );
  }
  if (status === 429 || status === 502 || status === 503 || status === 504) {
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

/** The response started but could not be read to its end, or made no sense. */
export function broken(err: unknown, call: FailedCall): ApiError {
  // A JSON parser's message quotes part of the body (which may be a model's unscrubbed answer): not logged.
  const why = err instanceof SyntaxError ? 'the answer is not valid JSON' : (err as Error).message;
  call.log.warn({ upstream: call.client.name, model: call.modelId, err: why }, 'the upstream answer broke off');
  return new ApiError(
    'internal_error',
    `The server behind '${call.modelId}' broke off its answer or sent one that makes no sense. Retry the request.`,
  );
}

/**
 * Runs one upstream call: the request, a non-200 mapped by `refused`, the body read by `read`. Any failure comes out
 * as an ApiError (or the client's own abort).
 */
export async function callUpstream<T>(
  call: FailedCall,
  signal: AbortSignal,
  send: () => Promise<UpstreamResponse>,
  read: (response: UpstreamResponse) => Promise<T>,
): Promise<T> {
  try {
    let response: UpstreamResponse;
    try {
      response = await send();
    } catch (err) {
      throw unreachable(err, call, signal);
    }
    if (response.statusCode !== 200) throw await refused(response, call);
    return await read(response);
  } catch (err) {
    if (signal.aborted) throw signal.reason instanceof Error ? signal.reason : new Error('aborted');
    throw err instanceof ApiError ? err : broken(err, call);
  }
}
