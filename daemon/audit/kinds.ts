// Reading the log back by kind, for the dashboard's audit page: the newest entries first, a page at a time.
import type { AuditService, EntryKind } from './index.js';

/** Entries read per turn of the event loop while searching, so calls go on being answered meanwhile. */
const SCAN_SLICE = 20_000;

export interface EntryPage {
  entries: Array<{ leaf: number; entry: Record<string, unknown> }>;
  /** Where the next page starts (pass as `before`); null when the search reached the start of the log or its bound. */
  next_before: number | null;
}

/**
 * Up to `limit` entries of `kind` (any kind if null) below leaf `before`, newest first, searching back over at most
 * `within` entries. Entries written before kinds existed are calls.
 */
export async function entriesOfKind(
  audit: AuditService,
  kind: EntryKind | null,
  before: number,
  limit: number,
  within: number,
): Promise<EntryPage> {
  const needle = kind ? Buffer.from(`"kind":"${kind}"`) : null;
  const legacyCall = kind === 'call';
  const last = Math.max(0, before - within);
  const entries: EntryPage['entries'] = [];
  let i = before - 1;
  for (; i >= last && entries.length < limit; i--) {
    const bytes = audit.log.entry(i);
    if (!bytes) continue;
    const candidate = !needle || bytes.includes(needle) || (legacyCall && !bytes.includes('"kind":'));
    if (candidate) {
      // A field of another kind could hold the same text (a nested "kind"): the entry's own kind decides.
      const entry = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
      if (!kind || (entry.kind ?? 'call') === kind) entries.push({ leaf: i, entry });
    }
    if ((before - i) % SCAN_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  return { entries, next_before: i >= last && i >= 0 ? i + 1 : null };
}
