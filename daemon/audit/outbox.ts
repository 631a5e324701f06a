// Administrative actions made outside the daemon (the CLI on the box, first boot) reach the audit log through an
// outbox in lmdb: the Merkle log has one writer, the daemon (its in-memory tree and journal), and the CLI may run
// while it does. The CLI puts each event in the outbox in the same lmdb transaction as the change it records; the
// daemon drains the outbox into the log in order, at start and every second, and deletes each event once its entry is
// durable. Each event has an id its entry carries (`event`). Before appending, the daemon marks the event with the
// log's size (`from`): after a crash between the append and the delete, the next drain finds the entry at or past
// that leaf and only deletes the event, so no event is logged twice.
import { randomBytes } from 'node:crypto';
import { userInfo } from 'node:os';
import type { Database } from 'lmdb';
import { openStore, type Store } from '../store/index.js';
import { isEntryKind, type EntryFields, type EntryKind } from './entries.js';
import type { AuditLog } from './log.js';

/**
 * Who made a change: a dashboard account (its public id), a unix user running the CLI on the box, first boot, or the
 * daemon itself (a software key it created, a chat key it revoked when its session expired). Entries that record no
 * one's action (a boot, a refusal) have no `by`.
 */
export type Actor = { account: string } | { cli: string } | 'firstboot' | 'daemon';

/** The unix user running this process, as the CLI's entries name it. */
export function cliActor(): Actor {
  let name: string;
  try {
    name = userInfo().username;
  } catch {
    name = `uid ${process.getuid?.() ?? '?'}`;
  }
  return { cli: name };
}

export interface OutboxEvent {
  id: string;
  kind: string;
  fields: EntryFields;
  /** When the action was made (the entry's `time` is when the daemon logged it). */
  at: string;
  /** The log's size when the daemon first took the event: its entry, if made, is at this leaf or later. */
  from?: number;
}

const DB = 'audit-outbox';

/** Keys sort by time, then by a random part: events are logged in the order they were made. */
function newKey(): { key: string; id: string } {
  const id = `evt_${randomBytes(12).toString('hex')}`;
  return { key: `${String(Date.now()).padStart(15, '0')}-${id}`, id };
}

export class AuditOutbox {
  private readonly db: Database<OutboxEvent, string>;

  constructor(store: Store) {
    this.db = store.db<OutboxEvent>(DB);
  }

  /**
   * Runs `change` (lmdb writes of its own) and puts the events it returns in the outbox, all in one transaction: the
   * change is not made without its events, nor its events without the change.
   */
  record<T>(change: () => { result: T; events: Array<{ kind: EntryKind; fields: EntryFields }> }): T {
    return this.db.transactionSync(() => {
      const { result, events } = change();
      const at = new Date().toISOString();
      for (const event of events) {
        const { key, id } = newKey();
        this.db.putSync(key, { id, kind: event.kind, fields: event.fields, at });
      }
      return result;
    });
  }

  /** Puts one event, for a change whose own write could not share the transaction (an account's password hash). */
  put(kind: EntryKind, fields: EntryFields): void {
    this.record(() => ({ result: undefined, events: [{ kind, fields }] }));
  }

  /** Events waiting, oldest first. */
  pending(): Array<{ key: string; event: OutboxEvent }> {
    const out: Array<{ key: string; event: OutboxEvent }> = [];
    for (const { key, value } of this.db.getRange()) out.push({ key, event: value });
    return out;
  }

  mark(key: string, event: OutboxEvent): void {
    this.db.putSync(key, event);
  }

  remove(key: string): void {
    this.db.removeSync(key);
  }
}

/** Puts one event in the outbox of the data directory `dataDir`, for a command that has no store open. */
export async function queueEvent(dataDir: string, kind: EntryKind, fields: EntryFields): Promise<void> {
  const store = openStore(dataDir);
  try {
    new AuditOutbox(store).put(kind, fields);
  } finally {
    await store.close();
  }
}

interface DrainLog {
  warn(obj: object, msg: string): void;
}

/** Whether an entry for event `id` is in the log at leaf `from` or later. */
function logged(log: AuditLog, id: string, from: number): boolean {
  const needle = Buffer.from(`"event":"${id}"`);
  for (let i = from; i < log.readable; i++) if (log.entry(i)?.includes(needle)) return true;
  return false;
}

/** The daemon's side: moves the outbox's events into the log, one at a time, in order. */
export class OutboxDrain {
  private readonly outbox: AuditOutbox;
  private running: Promise<number> | null = null;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    store: Store,
    private readonly log: AuditLog,
    private readonly append: (kind: EntryKind, fields: EntryFields) => Promise<number>,
    private readonly logger: DrainLog,
  ) {
    this.outbox = new AuditOutbox(store);
  }

  /** Drains now and then every `everyMs`. */
  start(everyMs: number): void {
    this.timer = setInterval(() => void this.drain(), everyMs);
    this.timer.unref();
  }

  /** Logs every waiting event; resolves with how many were logged. A drain already running is joined. */
  drain(): Promise<number> {
    return (this.running ??= this.drainOnce()
      .catch((err: Error) => {
        this.logger.warn({ err: err.message }, 'audit outbox: events wait for the next try');
        return 0;
      })
      .finally(() => (this.running = null)));
  }

  private async drainOnce(): Promise<number> {
    let done = 0;
    for (const { key, event } of this.outbox.pending()) {
      if (!isEntryKind(event.kind) || event.kind === 'call') {
        // Written by another version of the CLI: kept for one that knows it, not logged in a shape nobody defined.
        this.logger.warn({ kind: event.kind, event: event.id }, 'audit outbox: an event of an unknown kind is left waiting');
        continue;
      }
      if (event.from !== undefined && logged(this.log, event.id, event.from)) {
        this.outbox.remove(key);
        continue;
      }
      // The mark comes first and is synchronous: the entry's leaf is at least the size it records.
      if (event.from === undefined) this.outbox.mark(key, { ...event, from: this.log.readable });
      await this.append(event.kind, { ...event.fields, at: event.at, event: event.id });
      this.outbox.remove(key);
      done++;
    }
    return done;
  }

  /** Stops polling and logs what is waiting. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
    await this.drain();
  }
}
