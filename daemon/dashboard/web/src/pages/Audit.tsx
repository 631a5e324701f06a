// The audit trail: who signs the checkpoints (the TPM, or unmistakably a software key), the newest checkpoints, a
// check of the whole log in this browser by the same code as the offline verifier (tools/verify-anchors.mjs),
// one call's receipt by its request id, the newest entries filtered by kind (administrators), and the downloads an
// auditor takes to an air-gapped machine.
import { useEffect, useState } from 'preact/hooks';
import { verify } from '../../../../../tools/verify-anchors.mjs';
import { dash } from '../api.js';
import { ErrorNote, messageOf } from '../components.js';
import { formatDate, formatNumber, t } from '../i18n.js';

interface AuditSummary {
  origin: string;
  signer: 'tpm' | 'software' | null;
  key_id: string | null;
  public_key: string | null;
  tree_size: number;
  problem: string | null;
  checkpoints: Array<{ seq: number; size: number; time: string; signer: string }>;
  canExport: boolean;
}

interface Receipt {
  leaf: number;
  public_key: string;
  entry: Record<string, unknown>;
  checkpoint: { seq: number };
}

interface Outcome {
  ok: boolean;
  /** Verified, but entries newer than the newest checkpoint are not covered by a signature yet. */
  partial: boolean;
  lines: string[];
}

async function run(check: () => Promise<{ lines: string[] }>): Promise<Outcome> {
  try {
    const { lines } = await check();
    return { ok: true, partial: lines.some((l) => l.startsWith('NOT VERIFIED')), lines };
  } catch (err) {
    return { ok: false, partial: false, lines: [messageOf(err)] };
  }
}

// What this browser verified last time for this log (key id, size, root), as the offline verifier's --state file:
// the next check fails if the log was forked, rolled back, or re-signed by a key this browser did not trust.
const STATE = `sovereign.audit-state.${location.host}`;
function trustedState(): unknown {
  try {
    return JSON.parse(localStorage.getItem(STATE) ?? 'null') ?? undefined;
  } catch {
    return undefined;
  }
}

interface EntryPage {
  kinds: string[];
  entries: Array<{ leaf: number; entry: Record<string, unknown> }>;
}

const OWN_COLUMNS = new Set(['kind', 'v', 'time', 'region']);

/** An entry's fields other than those shown in their own columns. */
function details(entry: Record<string, unknown>): string {
  return JSON.stringify(Object.fromEntries(Object.entries(entry).filter(([field]) => !OWN_COLUMNS.has(field))));
}

/** An entry's kind; entries written before kinds existed are calls. */
const kindOf = (entry: Record<string, unknown>) => (typeof entry.kind === 'string' ? entry.kind : 'call');

/** The newest entries of the log, of every kind or of the one chosen. */
function Entries() {
  const [kind, setKind] = useState('');
  // The page names the filter it was fetched for (the table's data-filter), and an answer for a filter no longer
  // chosen is dropped: a slow answer must not replace a newer one.
  const [page, setPage] = useState<(EntryPage & { filter: string }) | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    let chosen = true;
    setError(null);
    dash<EntryPage>('GET', `/audit/entries?limit=50${kind ? `&kind=${encodeURIComponent(kind)}` : ''}`)
      .then((fetched) => chosen && setPage({ ...fetched, filter: kind }))
      .catch((err) => chosen && setError(messageOf(err)));
    return () => {
      chosen = false;
    };
  }, [kind]);
  return (
    <>
      <h2>{t('audit.entriesTitle')}</h2>
      <ErrorNote error={error} />
      <label>
        {t('audit.kind')}{' '}
        <select data-testid="kind-filter" value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
          <option value="">{t('audit.allKinds')}</option>
          {(page?.kinds ?? []).map((k) => (
            <option key={k} value={k}>
              {k}
            </option>
          ))}
        </select>
      </label>
      {page && (
        <table data-testid="entries" data-filter={page.filter} class="entries">
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">{t('audit.time')}</th>
              <th scope="col">{t('audit.kind')}</th>
              <th scope="col">{t('audit.details')}</th>
            </tr>
          </thead>
          <tbody>
            {page.entries.map(({ leaf, entry }) => (
              <tr key={leaf} data-kind={kindOf(entry)}>
                <td>{leaf}</td>
                <td>{typeof entry.time === 'string' ? formatDate(entry.time) : ''}</td>
                <td dir="ltr">{kindOf(entry)}</td>
                <td>
                  <code dir="ltr">{details(entry)}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {page && !page.entries.length && (
        <p data-testid="no-entries">
          {t('audit.noEntries')}{' '}
          {kind && (
            <button type="button" onClick={() => setKind('')}>
              {t('audit.showAll')}
            </button>
          )}
        </p>
      )}
    </>
  );
}

function Result(props: { outcome: Outcome | null; testId: string }) {
  if (!props.outcome) return null;
  return (
    <div class={props.outcome.ok ? 'verified' : 'failed'} role="status" data-testid={props.testId}>
      <strong>{!props.outcome.ok ? t('audit.failed') : props.outcome.partial ? t('audit.verifiedPartly') : t('audit.verified')}</strong>
      <ul dir="ltr">
        {props.outcome.lines.map((line, i) => (
          <li key={i}>{line}</li>
        ))}
      </ul>
    </div>
  );
}

export function AuditPage() {
  const [summary, setSummary] = useState<AuditSummary | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    dash<AuditSummary>('GET', '/audit')
      .then(setSummary)
      .catch((err) => setError(messageOf(err)));
  }, []);

  return (
    <main id="main">
      <h1>{t('audit.title')}</h1>
      <ErrorNote error={error} />
      {summary && (
        <>
          <p class={summary.signer === 'tpm' ? 'signer-banner tpm' : 'signer-banner software'} data-testid="signer">
            {summary.signer === 'tpm' ? t('audit.byTpm') : summary.signer === 'software' ? t('audit.bySoftware') : t('audit.bySomeone')}
          </p>
          <p>
            {t('audit.summary', { count: summary.tree_size, origin: summary.origin })} <code dir="ltr">{summary.key_id}</code>
          </p>
          {summary.problem && <p class="error">{summary.problem}</p>}
          <h2>{t('audit.latest')}</h2>
          <Checkpoints checkpoints={summary.checkpoints} />

          <h2>{t('audit.verifyTitle')}</h2>
          {summary.canExport ? <VerifyLog requireTpm={summary.signer === 'tpm'} /> : <p>{t('audit.adminOnly')}</p>}

          {summary.canExport && <Entries />}

          <h2>{t('audit.lookupTitle')}</h2>
          <ReceiptLookup setError={setError} admin={summary.canExport} />

          <h2>{t('audit.downloads')}</h2>
          <Downloads canExport={summary.canExport} />
          <p class="hint">{t('audit.offlineHint')}</p>
        </>
      )}
    </main>
  );
}

/** The newest signed checkpoints. */
function Checkpoints(props: { checkpoints: AuditSummary['checkpoints'] }) {
  return (
    <table data-testid="checkpoints">
      <thead>
        <tr>
          <th scope="col">#</th>
          <th scope="col">{t('audit.size')}</th>
          <th scope="col">{t('audit.time')}</th>
          <th scope="col">{t('audit.signer')}</th>
        </tr>
      </thead>
      <tbody>
        {props.checkpoints.map((c) => (
          <tr key={c.seq}>
            <td>{c.seq}</td>
            <td>{formatNumber(c.size)}</td>
            <td>{formatDate(c.time)}</td>
            <td>{c.signer === 'tpm' ? t('audit.signerTpm') : t('audit.signerSoftware')}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** Checks the whole log in this browser, against the checkpoint it trusted last time; requireTpm: every checkpoint MUST be signed by the TPM. */
function VerifyLog(props: { requireTpm: boolean }) {
  const [outcome, setOutcome] = useState<Outcome | null>(null);
  const [busy, setBusy] = useState(false);

  async function verifyLog() {
    setBusy(true);
    setOutcome(null);
    setOutcome(
      await run(async () => {
        const anchors = await dash<{
          tree_size: number;
          public_key: string | null;
          attestation_key: string | null;
          keys: Record<string, string>;
        }>('GET', '/audit/anchors.json');
        const res = await fetch(`/dashboard/api/audit/entries.jsonl?size=${anchors.tree_size}`, { credentials: 'same-origin' });
        if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
        const text = await res.text();
        const encoder = new TextEncoder();
        const entries =
          text === ''
            ? []
            : text
                .replace(/\n$/, '')
                .split('\n')
                .map((line) => encoder.encode(line));
        const keyPems = Object.values(anchors.keys ?? {});
        if (!keyPems.length && anchors.public_key) keyPems.push(anchors.public_key);
        const result = await verify({
          keyPems,
          anchors,
          entries,
          state: trustedState(),
          requireTpm: props.requireTpm,
          ...(anchors.attestation_key ? { akPem: anchors.attestation_key } : {}),
        });
        if (result.latest) localStorage.setItem(STATE, JSON.stringify(result.latest));
        return result;
      }),
    );
    setBusy(false);
  }

  return (
    <>
      <p>{t('audit.verifyHint')}</p>
      <p class="hint">{t('audit.trustHint')}</p>
      <button type="button" class="primary" disabled={busy} onClick={() => void verifyLog()}>
        {busy ? t('audit.verifying') : t('audit.verify')}
      </button>
      <Result outcome={outcome} testId="verify-result" />
    </>
  );
}

/** Finds one call's receipt by its request id, and checks it in this browser. */
function ReceiptLookup(props: { setError: (error: string | null) => void; admin: boolean }) {
  const [receipt, setReceipt] = useState<Receipt | null>(null);
  const [receiptOutcome, setReceiptOutcome] = useState<Outcome | null>(null);

  async function lookup(event: Event) {
    event.preventDefault();
    setReceipt(null);
    setReceiptOutcome(null);
    props.setError(null);
    const id = new FormData(event.currentTarget as HTMLFormElement).get('request_id');
    try {
      setReceipt(await dash<Receipt>('GET', `/audit/lookup?request_id=${encodeURIComponent(typeof id === 'string' ? id : '')}`));
    } catch (err) {
      props.setError(messageOf(err));
    }
  }

  async function verifyReceipt(r: Receipt) {
    const outcome = await run(() => verify({ keyPems: [r.public_key], receipt: r }));
    setReceiptOutcome(outcome);
    // The first-run checklist's last step: an administrator has verified a receipt.
    if (outcome.ok && props.admin) await dash('POST', '/checklist', { item: 'first_verified_receipt', leaf: r.leaf }).catch(() => {});
  }

  return (
    <>
      <form class="inline" onSubmit={(e) => void lookup(e)}>
        <label>
          {t('audit.requestId')}
          <input name="request_id" required dir="ltr" placeholder="req_…" size={40} />
        </label>
        <button type="submit">{t('audit.find')}</button>
      </form>
      {receipt && (
        <div data-testid="receipt">
          {/* Leaf and checkpoint numbers are identifiers, typed into the verifier as they are: never grouped or localised. */}
          <p>{t('audit.receiptOf', { leaf: String(receipt.leaf), seq: String(receipt.checkpoint.seq) })}</p>
          <pre dir="ltr">{JSON.stringify(receipt.entry, null, 2)}</pre>
          <button type="button" onClick={() => void verifyReceipt(receipt)}>
            {t('audit.verifyReceipt')}
          </button>
          <Result outcome={receiptOutcome} testId="receipt-result" />
        </div>
      )}
    </>
  );
}

/** What an auditor takes to an air-gapped machine: the verifier, and (administrators) the anchors and entries. */
function Downloads(props: { canExport: boolean }) {
  return (
    <ul>
      <li>
        <a href="/dashboard/api/audit/verify-anchors.mjs" download>
          {t('audit.downloadVerifier')}
        </a>
      </li>
      {props.canExport && (
        <>
          <li>
            <a href="/dashboard/api/audit/anchors.json" download>
              {t('audit.downloadAnchors')}
            </a>
          </li>
          <li>
            <a href={`/dashboard/api/audit/entries.jsonl`} download>
              {t('audit.downloadEntries')}
            </a>
          </li>
        </>
      )}
    </ul>
  );
}
