// Bearer authentication for every /v1 call. Every failure is the same 401 (`invalid_api_key`) so a caller learns
// nothing about which keys exist; only "no key at all" gets its own wording, since that is a client bug.
import { ApiError } from '../errors/index.js';
import type { KeyRecord, KeyRegistry } from '../keys/index.js';

export interface Principal {
  keyId: string;
  projectId: string;
  /** The key's own limits, or undefined to use the configured defaults. */
  rpm: number | undefined;
  tpm: number | undefined;
  /** The key's plan, or undefined for limits.defaultPlan. */
  plan: string | undefined;
}

const BEARER = /^Bearer +(\S+) *$/i;

export function principalOf(record: KeyRecord): Principal {
  return { keyId: record.id, projectId: record.projectId, rpm: record.rpm, tpm: record.tpm, plan: record.plan };
}

export function authenticate(header: string | undefined, registry: KeyRegistry): Principal {
  if (!header) {
    throw new ApiError(
      'invalid_api_key',
      "No API key provided. Send your key in an 'Authorization: Bearer <key>' header; the operator creates keys with 'sovereign keys create' or in the dashboard.",
    );
  }
  const match = BEARER.exec(header);
  const record = match ? registry.authenticate(match[1]!) : null;
  if (!record) {
    throw new ApiError(
      'invalid_api_key',
      'Invalid API key: it is malformed, unknown, revoked or rotated out. Use an active key from the dashboard or ask the operator for one.',
    );
  }
  return principalOf(record);
}
