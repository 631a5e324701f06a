// What the log says about itself and about one call, in the shape GET /v1/audit/anchors returns and the dashboard
// shows: the signer and key, and a call's receipt (its entry, the checkpoint covering it, the inclusion proof).
import { ApiError } from '../errors/index.js';
import { SIGNER_NOT_PROVISIONED, type AuditService } from './index.js';

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
  if (!audit.checkpoints) {
    // Without a signer no checkpoint will ever cover it: retrying cannot help, the operator must act.
    throw new ApiError(
      'audit_unavailable',
      `Entry ${leaf} is logged, but no checkpoint is signed on this device, so it has no receipt. ${audit.health().problem ?? SIGNER_NOT_PROVISIONED}.`,
      // The daemon said so at start, and health says so: each call asking is no new failure.
      { expected: true },
    );
  }
  const covering = audit.checkpoints.covering(leaf);
  if (!covering) {
    // The normal wait for the next checkpoint, not a failure of the log.
    throw new ApiError('audit_unavailable', `Entry ${leaf} is not in a signed checkpoint yet. Retry in a few seconds.`, {
      headers: { 'retry-after': String(Math.ceil(checkpointMs / 1000) + 1) },
      expected: true,
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

/**
 * The leaf of the newest entry logged for a request id (a stream's end entry rather than its start), or null: one
 * read of the index by request id (log.ts), plus the few entries still committing.
 */
export function findByRequestId(audit: AuditService, requestId: string): number | null {
  return audit.log.findRequest(requestId);
}
