// The entries the daemon makes besides calls: what waits in the outbox (the CLI's and first boot's actions), the
// boot entry, a software key it created, model digests and withdrawals, and the egress refusals it counts. Each is
// best effort once the daemon serves: a log that takes no entry (a full disk) is reported by health and its calls
// get 503, and such an entry is only warned about.
import type { FastifyBaseLogger as Logger } from 'fastify';
import type { AuditService, EntryFields, EntryKind } from '../audit/index.js';
import { bootFields, type BootFacts } from '../audit/boot.js';
import { OutboxDrain } from '../audit/outbox.js';
import { Tally } from '../audit/tally.js';
import type { RefusedAttempt } from '../egress/index.js';
import type { Store } from '../store/index.js';

/** How often the outbox is read for the CLI's events. */
const OUTBOX_POLL_MS = 1_000;
/** Egress refusals of a destination kind after its first are logged as one count per window (and at stop). */
export const EGRESS_WINDOW_MS = 5 * 60_000;

export class AuditEvents {
  private audit: AuditService | null = null;
  private drain: OutboxDrain | null = null;
  private resolveReady!: (audit: AuditService) => void;
  /** Resolves once the boot entry is written: refusals made before (the guard starts first) wait for it. */
  private readonly ready = new Promise<AuditService>((resolve) => (this.resolveReady = resolve));
  private readonly egress: Tally;

  constructor(
    private readonly log: Logger,
    private readonly boot: number,
  ) {
    this.egress = new Tally({
      append: (fields) => this.ready.then((audit) => this.write(audit, 'egress.refused', fields)),
      windowMs: EGRESS_WINDOW_MS,
      forgetIdle: false,
    });
  }

  egressRefused(attempt: RefusedAttempt): void {
    this.egress.note(attempt.kind, { boot: this.boot, destination: attempt.kind });
  }

  /** Logs what the outbox holds, a software key made at this start, and the boot entry; then drains every second. */
  async opened(audit: AuditService, store: Store, facts: BootFacts): Promise<void> {
    this.audit = audit;
    this.drain = new OutboxDrain(store, audit.log, (kind, fields) => audit.append(kind, fields), this.log);
    await this.drain.drain();
    const signer = audit.checkpoints?.signer;
    if (audit.createdKey && signer) {
      const keyId = signer.keyId.toString('hex');
      await this.write(audit, 'audit.key', {
        by: 'daemon',
        signer: signer.kind,
        key_id: keyId,
        replaced: audit.previousKeyId !== keyId ? audit.previousKeyId : null,
      });
    }
    await this.write(audit, 'boot', bootFields(facts));
    this.drain.start(OUTBOX_POLL_MS);
    this.resolveReady(audit);
  }

  /** An entry of the daemon's own (models withdrawn, the digests of the models served). */
  record(kind: EntryKind, fields: EntryFields): Promise<void> {
    return this.audit ? this.write(this.audit, kind, fields) : Promise.resolve();
  }

  private async write(audit: AuditService, kind: EntryKind, fields: EntryFields): Promise<void> {
    try {
      await audit.append(kind, fields);
    } catch (err) {
      this.log.error({ kind, err: (err as Error).message }, 'an audit entry could not be written');
    }
  }

  /** Writes the egress counts and what the outbox still holds; the log closes after. */
  async close(): Promise<void> {
    if (!this.audit) return;
    await this.egress.close();
    await this.drain?.close();
  }
}
