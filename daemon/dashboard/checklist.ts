// The first-run checklist: what a fresh box needs before its owner relies on it. Most steps the daemon sees for itself
// (the signer, the models, the keys); two only the operator can say: that the TLS certificate's fingerprint was written
// down (kept with that fingerprint: a new certificate makes the step due again) and that a receipt was verified. Their
// marks are shared state: with store: postgres, every replica shows the same checklist.
import { ApiError } from '../errors/index.js';
import { usesTls } from '../config/index.js';
import { certificateFingerprint } from '../net/index.js';
import type { DashboardDeps } from './deps.js';
import type { ChecklistItem } from './wire.js';

export const CHECKLIST_MARKS = ['tls_fingerprint_recorded', 'first_verified_receipt'] as const;
export type ChecklistMark = (typeof CHECKLIST_MARKS)[number];

const SPACE = 'operator-checklist';

interface Marks {
  tls_fingerprint_recorded?: { fingerprint: string; at: string };
  first_verified_receipt?: { leaf: number; at: string };
}

function marksOf(deps: DashboardDeps): Marks {
  const db = deps.store.db<Marks[ChecklistMark]>(SPACE);
  return {
    tls_fingerprint_recorded: db.get('tls_fingerprint_recorded') as Marks['tls_fingerprint_recorded'],
    first_verified_receipt: db.get('first_verified_receipt') as Marks['first_verified_receipt'],
  };
}

function tlsFingerprint(deps: DashboardDeps): string | null {
  const cert = deps.config.tls?.cert;
  if (!usesTls(deps.config.posture) || !cert) return null;
  try {
    return certificateFingerprint(cert);
  } catch {
    return null;
  }
}

export function checklist(deps: DashboardDeps): ChecklistItem[] {
  const marks = marksOf(deps);
  const signer = deps.audit.health().signer;
  const served = deps.catalog.all();
  const keys = deps.keys.listKeys();
  const items: ChecklistItem[] = [
    {
      id: 'audit_key_in_tpm',
      done: signer === 'tpm',
      page: 'audit',
      command: 'sovereign audit init-tpm',
      facts: { signer: signer ?? 'none' },
    },
    {
      id: 'model_verified',
      done: served.length > 0,
      page: 'models',
      command: 'sovereign models import FILE',
      facts: { served: served.length },
    },
  ];
  const fingerprint = tlsFingerprint(deps);
  // Plain HTTP on loopback (the device posture) has no certificate to record.
  if (fingerprint) {
    items.push({
      id: 'tls_fingerprint_recorded',
      done: marks.tls_fingerprint_recorded?.fingerprint === fingerprint,
      page: null,
      command: null,
      facts: { fingerprint },
    });
  }
  items.push(
    { id: 'first_key', done: keys.length > 0, page: 'keys', command: 'sovereign keys create --project NAME', facts: { keys: keys.length } },
    {
      id: 'first_verified_receipt',
      done: Boolean(marks.first_verified_receipt),
      page: 'audit',
      command: 'node verify-anchors.mjs --key public-key.pem --anchors anchors.json',
      facts: marks.first_verified_receipt ? { leaf: marks.first_verified_receipt.leaf } : {},
    },
  );
  return items;
}

/** Records an operator's mark; returns the audit entry's fields. The fingerprint marked must be the one served now. */
export async function markChecklist(
  deps: DashboardDeps,
  item: ChecklistMark,
  body: { fingerprint?: unknown; leaf?: unknown },
): Promise<Record<string, string | number>> {
  const put = (value: NonNullable<Marks[ChecklistMark]>) => deps.store.update((tx) => tx.put(SPACE, item, value));
  const at = new Date().toISOString();
  if (item === 'tls_fingerprint_recorded') {
    const fingerprint = tlsFingerprint(deps);
    if (!fingerprint)
      throw new ApiError('invalid_request_error', 'This posture serves no TLS certificate: there is no fingerprint to record.');
    if (body.fingerprint !== fingerprint) {
      throw new ApiError(
        'invalid_request_error',
        "'fingerprint' is not the certificate served now: reload the page and record the one it shows.",
        {
          param: 'fingerprint',
        },
      );
    }
    await put({ fingerprint, at });
    return { fingerprint };
  }
  const leaf = body.leaf;
  if (typeof leaf !== 'number' || !Number.isSafeInteger(leaf) || leaf < 0 || leaf >= deps.audit.log.size) {
    throw new ApiError('invalid_request_error', "'leaf' must be the number of an entry of the log whose receipt was verified.", {
      param: 'leaf',
    });
  }
  await put({ leaf, at });
  return { leaf };
}
