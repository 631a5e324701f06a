// Administrative actions made outside the daemon (the CLI on the box, first boot) reach the audit log through an
// outbox in lmdb: the Merkle log has one writer, the daemon (its in-memory tree and journal), and the CLI may run
// while it does. The CLI puts each event in the outbox in the same lmdb transaction as the change it records; the
// daemon drains the outbox into the log in order, at start and every second, and deletes each event once its entry is
// durable. Each event has an id its entry carries (`event`). Before appending, the daemon marks the event with the
// log's size (`from`): after a crash between the append and the delete, the next drain finds the entry at or past
// that leaf and only deletes the event, so no event is logged twice. A record that is not an event the CLI makes (a
// damaged or foreign one) is moved aside instead of blocking every event behind it.
import { randomBytes } from 'node:crypto';
import { userInfo } from 'node:os';
import type { Database, Key } from 'lmdb';
import { openStore, type Store } from '../store/index.js';
import { canonicalJson, type Canonical } from './canonical.js';
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
/** Records the drain could not log, each with why and its bytes as they were: kept for the operator, never logged. */
const REJECTED_DB = 'audit-outbox-rejected';
/** Far more than any event the CLI makes (the largest, a bundle's import, is a few KiB): a bigger one is damage. */
export const MAX_EVENT_BYTES = 1024 * 1024;
/**
 * Fields the log or the drain sets. An event carrying one was not made by the CLI; `request_id` in particular would
 * be indexed as a call's (request-index.ts).
 */
const RESERVED_FIELDS = ['kind', 'v', 'time', 'region', 'at', 'event', 'request_id'];

/** A record read from the outbox: an event, or what could not be decoded as one. */
export type Pending = { key: string; event: OutboxEvent } | { key: Key; event?: undefined; problem: string };

/**
 * Why a decoded outbox record cannot be logged, or null when it is an event the CLI makes. An event of a kind this
 * daemon does not know passes: another version's, it waits for one that knows it.
 */
export function eventProblem(value: unknown): string | null {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return 'it is not an event record';
  const event = value as Record<string, unknown>;
  if (typeof event.id !== 'string' || !/^evt_[0-9a-f]{24}$/.test(event.id)) return 'it has no event id';
  if (typeof event.kind !== 'string') return 'it names no kind';
  if (typeof event.at !== 'string') return 'it has no time';
  if (event.from !== undefined && !(Number.isSafeInteger(event.from) && (event.from as number) >= 0)) return 'its mark is not a leaf';
  const fields = event.fields;
  if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) return 'its fields are not an object';
  const reserved = RESERVED_FIELDS.find((name) => Object.hasOwn(fields, name));
  if (reserved) return `its fields hold '${reserved}', which only the log sets`;
  let json: string;
  try {
    json = canonicalJson(fields as Canonical);
  } catch (err) {
    return `its fields are not JSON (${(err as Error).message})`;
  }
  if (Buffer.byteLength(json) > MAX_EVENT_BYTES) return `it is ${Buffer.byteLength(json)} bytes long, more than any event`;
  return null;
}

/** Keys sort by time, then by a random part: events are logged in the order they were made. */
function newKey(): { key: string; id: string } {
  const id = `evt_${randomBytes(12).toString('hex')}`;
  return { key: `${String(Date.now()).padStart(15, '0')}-${id}`, id };
}

export class AuditOutbox {
  // Keys are typed as lmdb's own: the CLI writes strings, but a foreign writer may put a number or an array there.
  private readonly db: Database<OutboxEvent, Key>;
  private readonly rejected: Database<{ problem: string; record: Buffer | null }, Key>;

  constructor(store: Store) {
    this.db = store.db<OutboxEvent, Key>(DB);
    this.rejected = store.db(REJECTED_DB);
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

  /**
   * Records waiting, oldest first: each an event, or why it is not one. Read one by one, so that a record that cannot
   * be decoded does not hide the others.
   */
  pending(): Pending[] {
    const out: Pending[] = [];
    for (const key of this.db.getKeys()) {
      if (typeof key !== 'string') {
        out.push({ key, problem: 'its key is not one the CLI makes' });
        continue;
      }
      let value: unknown;
      try {
        value = this.db.get(key);
      } catch (err) {
        out.push({ key, problem: `it cannot be decoded (${(err as Error).message})` });
        continue;
      }
      const problem = eventProblem(value);
      out.push(problem ? { key, problem } : { key, event: value as OutboxEvent });
    }
    return out;
  }

  /** Moves a record that is not an event out of the outbox, with why and its bytes as they were. */
  reject(key: Key, problem: string): void {
    this.db.transactionSync(() => {
      this.rejected.putSync(key, { problem, record: this.db.getBinary(key) ?? null });
      this.db.removeSync(key);
    });
  }

  /** Records moved aside by reject(), for the operator. */
  rejectedRecords(): Array<{ key: string; problem: string }> {
    return Array.from(this.rejected.getRange(), ({ key, value }) => ({ key: String(key), problem: value.problem }));
  }

  mark(key: Key, event: OutboxEvent): void {
    this.db.putSync(key, event);
  }

  remove(key: Key): void {
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
  error(obj: object, msg: string): void;
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
  /** Events of unknown kinds already warned about: they wait for ever, and a warning each second would flood the log. */
  private readonly warned = new Set<string>();

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
    for (const record of this.outbox.pending()) {
      const { key, event } = record;
      if (!event) {
        // Damaged, or not written by the CLI: left in place it would stop every event behind it, every second, for ever.
        // The log says a record was set aside (never what it held, which nothing vouches for) before it is: a crash
        // between the two logs it twice rather than not at all.
        await this.append('outbox.rejected', { outbox_key: String(key).slice(0, 64), problem: record.problem.slice(0, 200) });
        this.outbox.reject(key, record.problem);
        this.logger.error({ key, problem: record.problem }, 'audit outbox: a record that is not an event was moved aside, not logged');
        continue;
      }
      if (!isEntryKind(event.kind) || event.kind === 'call') {
        // Written by another version of the CLI: kept for one that knows it, not logged in a shape nobody defined.
        if (!this.warned.has(key)) {
          this.warned.add(key);
          this.logger.warn({ kind: event.kind, event: event.id }, 'audit outbox: an event of an unknown kind is left waiting');
        }
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
