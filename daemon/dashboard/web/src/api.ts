// Calls to the dashboard's own API (cookie session, CSRF header on every change) and to /v1 with the chat app's key.
import type { KeyRow, ProjectRecord, UserView } from '../../wire.js';

export type { Alert, ChecklistItem, MetricsSeries, OverviewView } from '../../wire.js';

// The server's own types (daemon/dashboard/wire.ts), as the pages name them.
export type User = UserView;
export type Project = ProjectRecord;
export type Key = KeyRow;

export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
  ) {
    super(message);
  }
}

export interface Session {
  user: User | null;
  csrf: string;
  posture: 'device' | 'appliance' | 'cloud' | 'frontier';
  region: string;
  sovereign: boolean;
  signup: boolean;
}

let csrf = '';

export function useCsrf(token: string): void {
  csrf = token;
}

async function failure(res: Response): Promise<ApiFailure> {
  const body = (await res.json().catch(() => null)) as { error?: { code?: string; message?: string } } | null;
  return new ApiFailure(res.status, body?.error?.code ?? null, body?.error?.message ?? `${res.status} ${res.statusText}`);
}

export async function dash<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
  const res = await fetch(`/dashboard/api${path}`, {
    method,
    credentials: 'same-origin',
    headers: method === 'GET' ? {} : { 'content-type': 'application/json', 'x-csrf-token': csrf },
    ...(method === 'GET' ? {} : { body: JSON.stringify(body ?? {}) }),
  });
  if (!res.ok) throw await failure(res);
  return (await res.json()) as T;
}

/** A call to /v1 with the chat app's session-bound key. */
export async function v1(
  path: string,
  key: string,
  init: { method?: string; body?: BodyInit; json?: unknown; signal?: AbortSignal } = {},
): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  let body = init.body;
  if (init.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(init.json);
  }
  const res = await fetch(`/v1${path}`, { method: init.method ?? 'GET', headers, body: body ?? null, signal: init.signal ?? null });
  if (!res.ok) throw await failure(res);
  return res;
}
