// One OpenAI-compatible server, reached through a pool of keep-alive connections (undici). The client sends only
// what the daemon itself decided to send: never a caller's headers, never our keys; the upstream's own key (if it
// needs one) comes from a file the operator provides.
//
// A call that fails before the upstream has sent a byte of its answer (no connection, a connection reset before the
// response, or a 502/503/504 that says the request was not taken) is sent again, up to `retries` times, after a short
// jittered pause: every call made to an upstream (chat, embeddings, transcription, images) changes nothing on it, so
// a second try cannot do twice what the first did. Once a response has started, nothing is retried.
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool, type FormData } from 'undici';
import { Slots } from '../slots.js';
import type { SchedulingPolicy } from '../types.js';
import { readBody } from './body.js';
import { dispatch, type UpstreamResponse } from './response.js';

export interface UpstreamTarget {
  name: string;
  baseUrl: string;
  /** Bearer key the upstream expects, if any. */
  apiKey?: string;
  connections: number;
  /** Time for the upstream to send its response headers, and the longest gap between pieces of its body. */
  timeoutMs: number;
  /** Further tries after a failure before the first byte (see above). */
  retries: number;
  /** Calls that may wait for a connection (per project under the fair policy), as models.queue. */
  queue: number;
  policy?: SchedulingPolicy;
}

export type { UpstreamResponse };

/** Errors that mean no byte of a response arrived, so a second try is safe. */
const BEFORE_RESPONSE = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
]);

/** Statuses by which a server or the proxy in front of it says it did not take the request. */
const NOT_TAKEN = new Set([502, 503, 504]);

/** A Retry-After longer than this is not waited out here: the client hears it instead. */
const LONGEST_WAIT_MS = 2000;

function retryAfterMs(response: UpstreamResponse): number {
  const seconds = Number(response.header('retry-after'));
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 0;
}

/** The pause before try `attempt` (1, 2…): 50 ms doubling, with jitter so calls that failed together spread out. */
function backoffMs(attempt: number): number {
  const base = 50 * 2 ** (attempt - 1);
  return base / 2 + Math.random() * base;
}

export class UpstreamClient {
  readonly name: string;
  private readonly pool: Pool;
  /**
   * One connection of its own for health checks and the test call that learns an embeddings model's width: behind
   * the calls' pool they would wait for a free connection while long streams hold them all, and a busy upstream
   * would look down.
   */
  private readonly probes: Pool;
  /** The base URL's path without its trailing slash, e.g. '/v1'. */
  private readonly basePath: string;
  private readonly origin: string;
  private readonly jsonHeaders: Record<string, string>;
  private readonly plainHeaders: Record<string, string>;
  private readonly retries: number;
  readonly timeoutMs: number;
  /** Tries sent again since start. */
  retried = 0;
  /** Told when a call got no answer even after its retries (the health monitor checks again at once). */
  onUnreachable: () => void = () => {};
  /**
   * A call's turn at the pool's connections, for every model on this upstream: calls past `connections` wait here,
   * ordered as a local model's are (engines/slots.ts), not in the pool's arrival order.
   */
  readonly slots: Slots;

  constructor(target: UpstreamTarget) {
    const url = new URL(target.baseUrl);
    this.name = target.name;
    this.retries = target.retries;
    this.timeoutMs = target.timeoutMs;
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.origin = url.origin;
    this.pool = new Pool(url.origin, {
      connections: target.connections,
      pipelining: 1,
      headersTimeout: target.timeoutMs,
      bodyTimeout: target.timeoutMs,
      connectTimeout: Math.min(target.timeoutMs, 10_000),
      keepAliveTimeout: 30_000,
    });
    this.probes = new Pool(url.origin, {
      connections: 1,
      pipelining: 1,
      headersTimeout: target.timeoutMs,
      bodyTimeout: target.timeoutMs,
      connectTimeout: Math.min(target.timeoutMs, 10_000),
      keepAliveTimeout: 30_000,
    });
    this.plainHeaders = {
      accept: 'application/json, text/event-stream',
      ...(target.apiKey ? { authorization: `Bearer ${target.apiKey}` } : {}),
    };
    this.jsonHeaders = { 'content-type': 'application/json', ...this.plainHeaders };
    this.slots = new Slots({
      parallel: target.connections,
      queue: target.queue,
      label: `The upstream '${target.name}'`,
      policy: target.policy ?? 'fair',
    });
  }

  /**
   * POSTs a JSON body to `path` under the base URL. Rejects only when no response arrived (any status resolves).
   * `probe`: sent on the probes' own connection, once (a test call, not a client's).
   */
  post(path: string, body: string, signal: AbortSignal, options: { probe?: boolean } = {}): Promise<UpstreamResponse> {
    const request = { method: 'POST', path: this.basePath + path, headers: this.jsonHeaders, body, signal } as const;
    return options.probe ? dispatch(this.probes, request, signal) : this.send(request);
  }

  /** POSTs a multipart form (made fresh for each try: a form's body can be read once). */
  postForm(path: string, form: () => FormData, signal: AbortSignal): Promise<UpstreamResponse> {
    return this.send({ method: 'POST', path: this.basePath + path, headers: this.plainHeaders, body: form, signal });
  }

  /** GETs `path` under the base URL, once, on the probes' connection (health checks have their own schedule). */
  get(path: string, signal: AbortSignal): Promise<UpstreamResponse> {
    return dispatch(this.probes, { method: 'GET', path: this.basePath + path, headers: this.plainHeaders }, signal);
  }

  /**
   * Fetches a URL the upstream gave in its answer (an image server that answers with URLs), only if it is on the
   * upstream's own origin: an answer must not make the daemon reach anywhere else. At most `maxBytes`.
   */
  async fetchOwn(url: string, signal: AbortSignal, maxBytes: number): Promise<Buffer> {
    let target: URL;
    try {
      target = new URL(url, this.origin);
    } catch {
      throw new Error('the upstream gave a URL that does not parse');
    }
    if (target.origin !== this.origin) throw new Error('the upstream gave a URL on another origin; it is not fetched');
    const response = await dispatch(
      this.pool,
      { method: 'GET', path: target.pathname + target.search, headers: this.plainHeaders },
      signal,
    );
    if (response.statusCode !== 200) {
      await response.dump().catch(() => {});
      throw new Error(`the upstream's own URL answered status ${response.statusCode}`);
    }
    return readBody(response, maxBytes);
  }

  private async send(request: {
    method: 'POST';
    path: string;
    headers: Record<string, string>;
    body: string | (() => FormData);
    signal: AbortSignal;
  }): Promise<UpstreamResponse> {
    for (let attempt = 0; ; attempt++) {
      const body = typeof request.body === 'function' ? request.body() : request.body;
      let response: UpstreamResponse;
      try {
        response = await dispatch(
          this.pool,
          { method: request.method, path: request.path, headers: request.headers, body },
          request.signal,
        );
      } catch (err) {
        const code = (err as { code?: string }).code ?? '';
        if (request.signal.aborted) throw err;
        if (attempt >= this.retries || !BEFORE_RESPONSE.has(code)) {
          this.onUnreachable();
          throw err;
        }
        await this.pause(backoffMs(attempt + 1), request.signal, err);
        continue;
      }
      const wait = retryAfterMs(response);
      if (!NOT_TAKEN.has(response.statusCode) || attempt >= this.retries || wait > LONGEST_WAIT_MS) return response;
      // The refusal's body is not needed: the next try, or the last refusal, speaks for it.
      await response.dump().catch(() => {});
      await this.pause(Math.max(wait, backoffMs(attempt + 1)), request.signal, null);
    }
  }

  private async pause(ms: number, signal: AbortSignal, failure: unknown): Promise<void> {
    this.retried++;
    try {
      await sleep(ms, undefined, { signal });
    } catch {
      throw failure ?? signal.reason;
    }
  }

  private closing: Promise<void> | null = null;

  /** Closes both pools once their calls are done; later calls are refused. Safe to call again (the same promise). */
  close(): Promise<void> {
    return (this.closing ??= Promise.all([this.pool.close(), this.probes.close()]).then(() => {}));
  }
}
