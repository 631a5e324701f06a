// A client of the dashboard's API that keeps cookies as a browser does, for tests that check the rules the pages
// rely on (sessions, CSRF, who may touch which key) without a browser.
import { request, type RawResponse } from './http.js';

export class DashboardClient {
  readonly cookies = new Map<string, string>();
  /** Raw Set-Cookie lines of the last response. */
  lastSetCookie: string[] = [];

  constructor(
    readonly origin: string,
    readonly ca?: Buffer,
  ) {}

  get csrf(): string {
    // Over HTTPS the cookie carries the __Host- prefix.
    return this.cookies.get('__Host-sov_csrf') ?? this.cookies.get('sov_csrf') ?? '';
  }

  async call(method: string, path: string, body?: unknown, options: { csrf?: string | null } = {}): Promise<RawResponse> {
    const headers: Record<string, string> = {};
    if (this.cookies.size) headers.cookie = [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
    const csrf = options.csrf === undefined ? this.csrf : options.csrf;
    if (method !== 'GET' && csrf !== null) headers['x-csrf-token'] = csrf;
    if (method !== 'GET') headers['content-type'] = 'application/json';
    const res = await request(`${this.origin}/dashboard/api${path}`, {
      method,
      headers,
      ...(method !== 'GET' ? { body: JSON.stringify(body ?? {}) } : {}),
      ...(this.ca ? { ca: this.ca } : {}),
    });
    const set = res.headers['set-cookie'] ?? [];
    this.lastSetCookie = set;
    for (const line of set) {
      const pair = line.split(';')[0] ?? '';
      const eq = pair.indexOf('=');
      const name = pair.slice(0, eq);
      const value = pair.slice(eq + 1);
      if (/Max-Age=0/.test(line)) this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
    return res;
  }

  /** Fetches a CSRF cookie, as the page does on load. */
  async open(): Promise<RawResponse> {
    return this.call('GET', '/session');
  }
}
