// What the log says about itself and about one call, in the shape GET /v1/audit/anchors returns and the dashboard
// shows: the signer and key, and a call's receipt (its entry, the checkpoint covering it, the inclusion proof).
import { ApiError } from '../errors/index.js';
import type { AuditService } from './index.js';

export const proofText = (proof: Buffer[]) => proof.map((h) => h.toString('base64'));

export function describeLog(audit: AuditService) {
  const signer = audit.checkpoints?.signer;
  return {
    origin: audit.originName,
    signer: signer?.kind ?? null,
    key_id: signer?.keyId.toString('hex') ?? null,
    public_key: signer?.publicKeyPem ?? null,
    attestation_key: signer?.attestationKeyPem ?? null,
    tree_size: audit.log.size,
    problem: audit.health().problem,
  };
}

/**
 * The receipt of entry `leaf`, if `visible` accepts its entry (another project's entry is reported exactly like a
 * missing one). Refused with a Retry-After while no signed checkpoint covers it yet.
 */
export function receiptOf(audit: AuditService, leaf: number, visible: (entry: { project?: string }) => boolean, checkpointMs: number) {
  const bytes = audit.log.entry(leaf);
  const entry = bytes ? (JSON.parse(bytes.toString('utf8')) as { project?: string }) : undefined;
  if (!entry || !visible(entry)) throw new ApiError('not_found', `No audit entry ${leaf} for this key's project.`, { param: 'leaf' });
  const covering = audit.checkpoints?.covering(leaf);
  if (!covering) {
    throw new ApiError('audit_unavailable', `Entry ${leaf} is not in a signed checkpoint yet. Retry in a few seconds.`, {
      headers: { 'retry-after': String(Math.ceil(checkpointMs / 1000) + 1) },
    });
  }
  return {
    object: 'audit.receipt',
    ...describeLog(audit),
    leaf,
    entry,
    entry_canonical: bytes!.toString('utf8'),
    checkpoint: covering,
    inclusion: proofText(audit.log.inclusion(leaf, covering.size)),
  };
}

/** Entries read per turn of the event loop while searching, so calls go on being answered meanwhile. */
const SCAN_SLICE = 20_000;

/**
 * The newest entry logged for a request id, searching back over at most `within` entries; null if none. There is
 * no index by request id (it would cost every call a second write); the search reads raw entries newest first.
 */
export async function findByRequestId(audit: AuditService, requestId: string, within: number): Promise<number | null> {
  const needle = Buffer.from(`"request_id":${JSON.stringify(requestId)}`);
  // Acknowledged entries lmdb does not hold yet are searched too: a client asks right after its answer.
  const size = audit.log.readable;
  const last = Math.max(0, size - within);
  for (let i = size - 1; i >= last; i--) {
    if (audit.log.entry(i)?.includes(needle)) return i;
    if ((size - i) % SCAN_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  return null;
}
