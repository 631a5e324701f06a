// `sovereign audit export`: everything an operator needs to check the log on another machine: every entry
// (entries.jsonl, line N is leaf N, canonical JSON), every checkpoint with its consistency proof from the one before
// (anchors.json, the same shape as GET /v1/audit/anchors), and the public key (public-key.pem). In a cluster, also
// every replica's log as this one last heard it published (logs.json, the `logs` of GET /v1/audit/anchors).
import { mkdirSync, renameSync, writeFileSync, createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { once } from 'node:events';
import type { Store } from '../store/index.js';
import type { ListedLog } from './anchors.js';
import { originOfNote, type Checkpoint } from './checkpoint.js';
import { AuditLog } from './log.js';

export interface ExportSummary {
  dir: string;
  entries: number;
  checkpoints: number;
  keyId: string | null;
  /** The replicas' logs written to logs.json (a cluster's export), or null when there is none. */
  logs: number | null;
}

export async function exportAudit(
  store: Store,
  dir: string,
  origin: string,
  progress: (done: number, total: number) => void = () => {},
  /**
   * Every replica's published log, read before this log is (so this log's own published checkpoint is one its
   * entries cover); written to logs.json. Undefined without a cluster.
   */
  logs?: ListedLog[],
): Promise<ExportSummary> {
  mkdirSync(dir, { recursive: true });
  const log = AuditLog.open(store);
  const { anchors, size, allKeys } = exportAnchors(store, log, origin);
  const last = anchors.checkpoints.at(-1);
  const { public_key: publicKey, attestation_key: attestationKey } = anchors;

  const entriesFile = join(dir, 'entries.jsonl');
  const out = createWriteStream(`${entriesFile}.tmp`);
  for (let i = 0; i < size; i++) {
    if (!out.write(`${log.entry(i)!.toString('utf8')}\n`)) await once(out, 'drain');
    if (i % 10_000 === 0) progress(i, size);
  }
  out.end();
  await once(out, 'finish');
  renameSync(`${entriesFile}.tmp`, entriesFile);
  progress(size, size);

  writeFileSync(join(dir, 'anchors.json'), `${JSON.stringify(anchors, null, 2)}\n`);
  if (publicKey) writeFileSync(join(dir, 'public-key.pem'), publicKey);
  for (const [id, pem] of Object.entries(allKeys)) if (id !== last?.key_id) writeFileSync(join(dir, `public-key-${id}.pem`), pem);
  if (attestationKey) writeFileSync(join(dir, 'attestation-key.pem'), attestationKey);
  if (logs) {
    const file = { object: 'audit.logs', exported_at: new Date().toISOString(), logs };
    writeFileSync(join(dir, 'logs.json'), `${JSON.stringify(file, null, 2)}\n`);
  }
  return { dir, entries: size, checkpoints: anchors.checkpoints.length, keyId: last?.key_id ?? null, logs: logs?.length ?? null };
}

/**
 * The anchors of an export: every checkpoint the log's current size covers, each with its consistency proof from
 * the one before, and every key that signed one. The entries to check them against are the first `size`.
 */
export function exportAnchors(store: Store, log: AuditLog, origin: string) {
  const checkpoints: Checkpoint[] = [];
  for (const { value } of store.db<Checkpoint, number>('audit-checkpoints').getRange()) checkpoints.push(value);
  // Checkpoints signed after this export's view of the log would not match its entries: leave them out.
  const size = log.size;
  const covered = checkpoints.filter((c) => c.size <= size);
  const last = covered.at(-1);
  const keys = store.db<string>('audit-keys');
  const publicKey = last?.key_id ? (keys.get(last.key_id) ?? null) : null;
  const attestationKey = last?.key_id ? (keys.get(`${last.key_id}:attestation`) ?? null) : null;
  // Every key that signed a checkpoint here: after a key was replaced, older checkpoints need the older key.
  const allKeys: Record<string, string> = {};
  for (const id of new Set(covered.map((c) => c.key_id))) {
    const pem = id ? keys.get(id) : undefined;
    if (pem) allKeys[id] = pem;
  }
  const anchors = {
    object: 'audit.anchors',
    origin: covered.length ? originOfNote(covered.at(-1)!.note) : origin,
    key_id: last?.key_id ?? null,
    public_key: publicKey,
    attestation_key: attestationKey,
    keys: allKeys,
    tree_size: size,
    checkpoints: covered.map((c, i) => ({
      ...c,
      consistency: i
        ? {
            from_seq: covered[i - 1]!.seq,
            from_size: covered[i - 1]!.size,
            proof: log.consistency(covered[i - 1]!.size, c.size).map((h) => h.toString('base64')),
          }
        : null,
    })),
  };
  return { anchors, size, allKeys };
}
