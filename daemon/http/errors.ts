// Every error leaves in OpenAI's shape with the right status: ours (ApiError), fastify's (validation, body
// parsing, media type), Node's HTTP parser's (malformed requests), and anything unexpected (500, no stack).
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError, MESSAGES } from '../errors/index.js';
import { SharedStateUnavailable, writeFailureOf, type WriteFailureCode } from '../store/index.js';
import { requestBeingRead } from './context.js';

interface ValidationIssue {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/** `/messages/0/role` → `messages[0].role`, the form OpenAI uses in `param`. */
function paramOf(issue: ValidationIssue): string | null {
  const parts = issue.instancePath.split('/').filter(Boolean);
  const missing = issue.params.missingProperty;
  if (typeof missing === 'string') parts.push(missing);
  if (!parts.length) return null;
  return parts.reduce((acc, part) => (/^\d+$/.test(part) ? `${acc}[${part}]` : acc ? `${acc}.${part}` : part), '');
}

function validationMessage(issue: ValidationIssue, param: string | null): string {
  const where = param ? `'${param}'` : 'the request body';
  switch (issue.keyword) {
    case 'required':
      return `Missing required parameter ${where}.`;
    case 'type':
      return `Invalid type for ${where}: expected ${String(issue.params.type)}.`;
    case 'enum':
      return `Invalid value for ${where}: must be one of ${(issue.params.allowedValues as unknown[]).map(String).join(', ')}.`;
    case 'additionalProperties':
      return `Unrecognized parameter '${param ? `${param}.` : ''}${String(issue.params.additionalProperty)}'.`;
    default:
      return `Invalid value for ${where}: ${issue.message ?? 'not allowed'}.`;
  }
}

export function toApiError(err: FastifyError & { validation?: ValidationIssue[] }, bodyLimit: number): ApiError {
  if (err instanceof ApiError) return err;
  if (Array.isArray(err.validation) && err.validation.length) {
    // For a parameter with several accepted forms, ajv reports each form's failure and then `anyOf`: name them all.
    const anyOf = err.validation.find((i) => i.keyword === 'anyOf');
    if (anyOf) {
      const param = paramOf(anyOf);
      const forms = [
        ...new Set(
          err.validation.filter((i) => i.keyword === 'type' && i.instancePath === anyOf.instancePath).map((i) => String(i.params.type)),
        ),
      ];
      const expected = forms.length ? `expected ${forms.join(' or ')}` : 'none of its accepted forms match';
      return new ApiError('invalid_request_error', `Invalid value for ${param ? `'${param}'` : 'the request body'}: ${expected}.`, {
        param,
      });
    }
    const issue = err.validation[0]!;
    const param = paramOf(issue);
    return new ApiError('invalid_request_error', validationMessage(issue, param), { param });
  }
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError(
        'payload_too_large',
        `The request body is larger than the ${bodyLimit}-byte limit. Send less (the operator sets limits.bodyBytes).`,
      );
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ApiError('unsupported_media_type', "Unsupported Content-Type. Send the body as 'application/json'.");
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('invalid_request_error', 'The request body is empty. Send a JSON object.');
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new ApiError('invalid_request_error', 'Content-Length does not match the body that was sent.');
  }
  if (err instanceof SyntaxError || err.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
    return new ApiError(
      'invalid_request_error',
      'The request body is not valid JSON. Send a JSON object (check quoting and trailing commas).',
    );
  }
  const failure = writeFailureOf(err);
  if (failure) return storageUnavailable(failure);
  if (err instanceof SharedStateUnavailable) return sharedStateUnavailable();
  const status = err.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    return new ApiError('invalid_request_error', err.message || 'The request could not be processed.');
  }
  return new ApiError('internal_error', MESSAGES.internal);
}

const STORAGE_WHY: Record<WriteFailureCode, string> = {
  ENOSPC: 'its disk is full',
  EDQUOT: 'its disk quota is used up',
  EROFS: 'its file system is read-only',
  EIO: 'its device reports input/output errors (is the disk full?)',
  COMMIT: 'the database could not commit (is the disk full?)',
};

/** A call that needed a write the data directory could not take (a full disk): nothing of it was kept. */
export function storageUnavailable(code: WriteFailureCode): ApiError {
  return new ApiError(
    'storage_unavailable',
    `The daemon's data directory cannot be written: ${STORAGE_WHY[code]}, so this call was not completed. The operator must free space on the data disk (GET /v1/health says what failed); retry after the seconds in Retry-After.`,
    { headers: { 'retry-after': '10' } },
  );
}

/** A call that needed the state replicas share (store: postgres) while this replica cannot reach it. */
export function sharedStateUnavailable(): ApiError {
  return new ApiError(
    'shared_state_unavailable',
    'This replica cannot reach the database the replicas share, so it cannot complete this call now (nothing of it was kept). Retry after the seconds in Retry-After; another replica behind the load balancer may answer. GET /readyz (no key needed) says what fails.',
    { headers: { 'retry-after': '2' } },
  );
}

/** The client closed its connection: nothing can reach it any more, and its going is not the daemon's failure. */
export function clientGone(request: FastifyRequest): boolean {
  return request.raw.socket?.destroyed ?? true;
}

export function sendError(request: FastifyRequest, reply: FastifyReply, error: ApiError): FastifyReply {
  // Outside the pipeline (a request refused by fastify before the identify stage) there is no call to note it on.
  if (request.call) request.call.errorCode = error.code;
  if (!clientGone(request)) {
    if (error.expected) request.log.info({ code: error.code, status: error.status }, 'request refused');
    else if (error.status >= 500) request.log.error({ code: error.code }, 'request failed');
  }
  return reply.code(error.status).headers(error.headers).type('application/json; charset=utf-8').send(error.toBody());
}

/**
 * Node's HTTP parser rejects some requests before fastify sees them (control characters in headers, bad request
 * lines, header overflow, timeouts). They still get our headers and our error shape.
 */
export function writeClientError(err: NodeJS.ErrnoException, socket: Socket, headers: Record<string, string>): void {
  // A response already under way on this socket must not get a second status line in the middle of it.
  const inProgress = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || !socket.writable || inProgress) {
    socket.destroy();
    return;
  }
  // A call whose body the parser was reading: its request line and headers were fine, its body is not. The answer is
  // that call's, with its request id, and its audit entry records the same (cutOffCall).
  const call = requestBeingRead(socket);
  if (call) {
    const timedOut = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
    const error = timedOut
      ? new ApiError('request_timeout', 'The request was not received in time. Send the whole request without pausing.')
      : new ApiError(
          'invalid_request_error',
          err.code === 'HPE_INVALID_EOF_STATE'
            ? 'The request body was cut short: the connection ended before the whole body had arrived. Send the whole body its Content-Length announces.'
            : 'The request body cannot be read: its framing is malformed (check its chunked encoding and Content-Length). Check what your client sends.',
        );
    cutOffCall(call, error, timedOut ? 'Request Timeout' : 'Bad Request', headers);
    return;
  }
  let status = 400;
  let reason = 'Bad Request';
  let message = 'Malformed HTTP request (bad request line or header). Check the header names and values your client sends.';
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    status = 431;
    reason = 'Request Header Fields Too Large';
    message = 'The request headers are too large. Send smaller headers.';
  } else if (err.code === 'CONNECT') {
    status = 405;
    reason = 'Method Not Allowed';
    message = 'CONNECT is not supported: this is an API server, not a proxy.';
  } else if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    status = 408;
    reason = 'Request Timeout';
    message = 'The request was not received in time. Send the whole request without pausing.';
  }
  writeSocketError(socket, status, reason, new ApiError('invalid_request_error', message), headers);
}

/**
 * A call whose body cannot be read to its end (it stopped arriving, or Node's parser found it malformed): answered
 * with `error` straight on its socket, as Node answers its own request timeout, with the call's own request id
 * (`headers` hold the fixed ones); its audit entry says the same, since the error handler answers with `call.cutOff`
 * once the body's reading fails. The connection closes once the answer has gone (a client that reads nothing at all
 * is not waited for long), which ends the call and gives its place back.
 */
export function cutOffCall(request: FastifyRequest, error: ApiError, reason: string, headers: Record<string, string>): void {
  request.call.cutOff = error;
  const socket = request.raw.socket;
  writeSocketError(socket, error.status, reason, error, { ...headers, 'X-Request-Id': request.id });
  const destroy = () => socket.destroy();
  socket.once('finish', destroy);
  setTimeout(destroy, 1000).unref();
}

/** An error in OpenAI's shape written straight to a socket, ending it (for answers outside any response object). */
export function writeSocketError(socket: Socket, status: number, reason: string, error: ApiError, headers: Record<string, string>): void {
  const body = JSON.stringify(error.toBody());
  const lines = [
    `HTTP/1.1 ${status} ${reason}`,
    'Content-Type: application/json; charset=utf-8',
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Connection: close',
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  socket.end(`${lines.join('\r\n')}\r\n\r\n${body}`);
}

/** An error written straight to a Node response, for the few events that never reach fastify. */
export function writeResponseError(res: ServerResponse, status: number, message: string, headers: Record<string, string>): void {
  const body = JSON.stringify(new ApiError('invalid_request_error', message).toBody());
  res.writeHead(status, {
    ...headers,
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(body),
    Connection: 'close',
  });
  res.end(body);
}
