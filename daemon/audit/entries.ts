// The kinds of audit entries and their fields' type: apart from the log, so that the CLI, which only queues events
// (outbox.ts), does not load the log and its signers.
import { canonicalJson, type Canonical } from './canonical.js';

/**
 * Every kind of entry and the version of its format. An entry names both (`kind`, `v`), so a reader knows which
 * fields to expect; a kind's version goes up whenever its fields change. Entries written before kinds existed have
 * `v` 1 and no `kind`: they are calls. docs/audit.md shows one example of each kind.
 */
export const ENTRY_KINDS = {
  // v 3: a streamed call names its start entry (`stream_start`).
  call: 3,
  'stream.start': 1,
  // What is not a /v1 call (docs/audit.md, "Other entries"): administrative actions, starts, refusals.
  boot: 1,
  'boot.models': 1,
  'project.created': 1,
  'project.limits': 1,
  'key.created': 1,
  'key.rotated': 1,
  'key.revoked': 1,
  'key.limits': 1,
  'key.plan': 1,
  'account.created': 1,
  'account.role': 1,
  'account.password': 1,
  'signin.refused': 1,
  'model.imported': 1,
  'bundle.imported': 1,
  'model.listed': 1,
  'model.withdrawn': 1,
  'audit.key': 1,
  'outbox.rejected': 1,
  'egress.refused': 1,
  'operator.checklist': 1,
} as const;

export function isEntryKind(kind: string): kind is EntryKind {
  return Object.hasOwn(ENTRY_KINDS, kind);
}

export type EntryKind = keyof typeof ENTRY_KINDS;

/** The fields of an entry other than a call's: plain JSON values, never a secret, a password or a prompt. */
export type EntryFields = { [field: string]: Canonical | undefined };

/** An entry of `kind` as canonical JSON; `kind`, `v`, `time` and `region` are the log's, not the caller's. */
export function entryJson(kind: EntryKind, fields: EntryFields, time: string, region: string): string {
  return canonicalJson({ ...fields, kind, v: ENTRY_KINDS[kind], time, region });
}
