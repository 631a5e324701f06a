// One OpenAI-compatible server, reached through a pool of keep-alive connections (undici). The client sends only
// what the daemon itself decided to send: never a caller's headers, never our keys; the upstream's own key (if it
// needs one) comes from a file the operator provides.
import { Pool, type Dispatcher } from 'undici';

export interface UpstreamTarget {
  name: string;
  baseUrl: string;
  /** Bearer key the upstream expects, if any. */
  apiKey?: string;
  connections: number;
  /** Time for the upstream to send its response headers, and the longest gap between pieces of its body. */
  timeoutMs: number;
}

export type UpstreamResponse = Dispatcher.ResponseData;

export class UpstreamClient {
  readonly name: string;
  private readonly pool: Pool;
  /** The base URL's path without its trailing slash, e.g. '/v1'. */
  private readonly basePath: string;
  private readonly headers: Record<string, string>;

  constructor(target: UpstreamTarget) {
    const url = new URL(target.baseUrl);
    this.name = target.name;
    this.basePath = url.pathname.replace(/\/+$/, '');
    this.pool = new Pool(url.origin, {
      connections: target.connections,
      pipelining: 1,
      headersTimeout: target.timeoutMs,
      bodyTimeout: target.timeoutMs,
      connectTimeout: Math.min(target.timeoutMs, 10_000),
      keepAliveTimeout: 30_000,
    });
    this.headers = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...(target.apiKey ? { authorization: `Bearer ${target.apiKey}` } : {}),
    };
  }

  /** POSTs a JSON body to `path` under the base URL. Rejects only when no response arrived (any status resolves). */
  post(path: string, body: string, signal: AbortSignal): Promise<UpstreamResponse> {
    return this.pool.request({ method: 'POST', path: this.basePath + path, headers: this.headers, body, signal });
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}
