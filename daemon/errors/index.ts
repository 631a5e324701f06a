// One registry for every error the API can return: code, OpenAI `type`, HTTP status. Handlers throw ApiError;
// the HTTP layer turns it into OpenAI's error shape. A code is never reused for another meaning.

export const ERRORS = {
  invalid_request_error: { status: 400, type: 'invalid_request_error' },
  invalid_api_key: { status: 401, type: 'invalid_request_error' },
  not_signed_in: { status: 401, type: 'authentication_error' },
  invalid_credentials: { status: 401, type: 'authentication_error' },
  permission_denied: { status: 403, type: 'permission_error' },
  csrf_token_invalid: { status: 403, type: 'permission_error' },
  not_found: { status: 404, type: 'invalid_request_error' },
  model_not_found: { status: 404, type: 'invalid_request_error' },
  operation_unavailable: { status: 404, type: 'invalid_request_error' },
  method_not_allowed: { status: 405, type: 'invalid_request_error' },
  request_timeout: { status: 408, type: 'invalid_request_error' },
  conflict: { status: 409, type: 'invalid_request_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  rate_limit_exceeded: { status: 429, type: 'requests' },
  internal_error: { status: 500, type: 'server_error' },
  model_not_ready: { status: 503, type: 'server_error' },
  server_overloaded: { status: 503, type: 'server_error' },
  audit_unavailable: { status: 503, type: 'server_error' },
  storage_unavailable: { status: 503, type: 'server_error' },
  shared_state_unavailable: { status: 503, type: 'server_error' },
} as const satisfies Record<string, { status: number; type: string }>;

export type ErrorCode = keyof typeof ERRORS;

/**
 * Refusals that are part of normal operation, whoever throws them: a model still loading, the device or a key at its
 * limit. They are logged at info, not as failures (an operator's alerts watch the error level).
 */
const EXPECTED: ReadonlySet<ErrorCode> = new Set(['model_not_ready', 'server_overloaded', 'rate_limit_exceeded']);

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: ErrorCode };
}

export class ApiError extends Error {
  readonly status: number;
  readonly type: string;
  readonly param: string | null;
  /** Extra response headers this error needs (Retry-After, rate-limit headers). */
  readonly headers: Record<string, string>;
  /** A refusal in normal operation (logged at info), not a failure of the daemon (a 5xx is logged at error). */
  readonly expected: boolean;

  constructor(
    readonly code: ErrorCode,
    message: string,
    options: { param?: string | null; headers?: Record<string, string>; type?: string; expected?: boolean } = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = ERRORS[code].status;
    this.type = options.type ?? ERRORS[code].type;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
    this.expected = options.expected ?? EXPECTED.has(code);
  }

  toBody(): ErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export function isApiError(value: unknown): value is ApiError {
  return value instanceof ApiError;
}

// Messages used in more than one place.
export const MESSAGES = {
  internal: 'The server hit an unexpected error. Retry the request; if it persists, report the X-Request-Id to the operator.',
  overloaded: 'The device is at capacity. Retry after the number of seconds in Retry-After.',
} as const;
