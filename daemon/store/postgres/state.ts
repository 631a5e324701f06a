// The shared state in PostgreSQL, and this replica's copy of it in lmdb. PostgreSQL is the authority: a change is
// acknowledged once it committed there. Each replica keeps a copy of every shared record in its own lmdb, so reads
// (authentication on every call) cost what they cost on one machine; the copy follows PostgreSQL through
// notifications (LISTEN/NOTIFY), and through a poll a few times a second in case one is lost.
//
// The copy is trusted only while it is known to be recent: a replica that has not confirmed it holds every change
// within `STALE_MS` (PostgreSQL down, the network cut) refuses to authenticate, so a key revoked anywhere stops
// working everywhere within that bound, even through an outage.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { Key } from 'lmdb';
import { pack, unpack } from 'msgpackr';
import pg from 'pg';
import { addCounts, type Counts, type RangeOptions, type Tx } from '../tx.js';
import { schemaProblem, schemaVersion } from './migrations.js';

/** The longest a replica trusts its copy without hearing from PostgreSQL: the revocation bound. */
export const STALE_MS = 1_000;
/** How often a replica asks PostgreSQL for the newest change number, notifications or not. */
const POLL_MS = 200;
/** Rows copied per query and per lmdb transaction while catching up; fewer when they are large (PAGE_BYTES). */
const PAGE = 2_000;
/** Bytes of values copied per query at most (but at least one row). */
const PAGE_BYTES = 32 << 20;
/** Times a change is tried again on a newer copy when something it read changed meanwhile. */
const ATTEMPTS = 20;
/** Changes committed together at most, and their bytes (a change larger alone goes alone). */
const MAX_BATCH = 256;
const MAX_BATCH_BYTES = 16 << 20;
/**
 * Bytes of values written per statement at most (but at least one row): pg sends an array of bytea as text, two
 * characters a byte, and a JavaScript string holds at most about 512 MB.
 */
const STATEMENT_BYTES = 16 << 20;
const CHANNEL = 'sovereign_state';
/** Hours a removed record's row is kept for replicas catching up, before it is purged. */
const TOMBSTONE_HOURS = 1;
/** How often a serving replica purges the removed records older than that (every replica may; it is idempotent). */
const PURGE_MS = 10 * 60_000;
/** How long the CLI waits for the daemon beside it to copy a change. */
const FOLLOW_MS = 5_000;

export interface PostgresOptions {
  url: string;
  passwordFile?: string;
  poolSize?: number;
  timeoutMs?: number;
}

/** What this replica's copy is made of: its lmdb, with the named databases the shared state occupies. */
export interface LocalCopy {
  get(space: string, key: Key): unknown;
  range(space: string, options: RangeOptions): Iterable<{ key: Key; value: unknown }>;
  /**
   * Writes rows (value undefined: removed) and the change number they bring the copy to, atomically; then tells the
   * store's listeners of the rows another process wrote (`theirs`).
   */
  apply(rows: { space: string; key: Key; value: unknown; theirs: boolean }[], seq: number): void;
  /** The change number the copy holds (every process sharing the lmdb moves it forward only). */
  applied(): number;
  /** Empties every shared space (before a full copy). */
  clear(): void;
  isShared(space: string): boolean;
}

/** PostgreSQL is out of reach (or refused as unavailable): the call that needed it cannot complete now. */
export class SharedStateUnavailable extends Error {
  constructor(
    readonly problem: string,
    options?: { cause?: unknown },
  ) {
    super(problem, options);
    this.name = 'SharedStateUnavailable';
  }
}

/** A serving replica's copy is older than the removals PostgreSQL still keeps: only a restart (a rebuild) helps. */
class CopyTooOld extends Error {
  constructor(applied: number, purged: number) {
    super(
      `this replica's copy of the shared state stops at change ${applied}, and removals up to ${purged} have been purged (a replica cut off from PostgreSQL for over ${TOMBSTONE_HOURS} h): restart it to rebuild its copy`,
    );
  }
}

/**
 * PostgreSQL holds fewer changes than this copy: it went back in time (restored from a backup, or failed over to a
 * standby that had not received the last commits). The numbers of the changes lost will be given to new ones, which a
 * copy past them would never take in (a key revoked, unseen): only a rebuild helps.
 */
class CopyAhead extends Error {
  constructor(applied: number, head: number) {
    super(
      `this replica's copy of the shared state holds changes up to ${applied}, but PostgreSQL's last is ${head}: the database went back in time (restored, or failed over to a standby behind it); restart this replica to rebuild its copy`,
    );
  }
}

/** Errors that mean PostgreSQL cannot be reached or cannot serve now, not that a statement is wrong. */
function unavailable(err: unknown): boolean {
  if (err instanceof SharedStateUnavailable) return true;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    // 08: connection exception; 53: insufficient resources; 57: operator intervention (shutdown); 40: rollbacks.
    return /^(08|53|57|40)/.test(code);
  }
  // Node's socket errors (ECONNREFUSED, ECONNRESET, ETIMEDOUT) and pg's own (a timeout, a terminated connection).
  return typeof code === 'string' || /timeout|terminated|Connection|connect/i.test((err as Error)?.message ?? '');
}

function describe(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return `PostgreSQL does not answer (${e.code ? `${e.code}: ` : ''}${e.message || 'no reason given'})`;
}

function readPassword(file: string): string {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new Error(`cannot read postgres.passwordFile '${file}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/**
 * How to connect: the URL with the password from its file. pg lets a connection string's fields override separate
 * options (a URL without a password would unset it), so the password goes into the URL given to pg, which is never
 * logged; messages name `options.url`.
 */
export function connectionConfig(options: PostgresOptions, applicationName: string): pg.ClientConfig {
  const url = new URL(options.url);
  if (options.passwordFile) url.password = encodeURIComponent(readPassword(options.passwordFile));
  const timeoutMs = options.timeoutMs ?? 2_000;
  return {
    connectionString: url.toString(),
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
    application_name: applicationName,
  };
}

/** A change waiting for the next commit. */
interface Pending {
  snapshot: number;
  reads: Set<string>;
  writes: Write[];
  /** Bytes of its writes' values. */
  bytes: number;
  resolve(committed: boolean): void;
  reject(err: unknown): void;
}

interface Write {
  space: string;
  key: Key;
  kind: 'put' | 'remove' | 'add';
  value?: unknown;
  /** A put's value as stored (msgpack), packed when the change is made. */
  packed?: Buffer;
  counts?: Counts;
}

const idOf = (space: string, key: Key) => `${space}\u0000${JSON.stringify(key)}`;

export class PostgresState {
  private readonly pool: pg.Pool;
  private listener: pg.Client | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private purgeTimer: NodeJS.Timeout | null = null;
  private polling: Promise<void> | null = null;
  private pollAgain = false;
  private catching: Promise<void> = Promise.resolve();
  /**
   * When the copy was last known to hold every change (the start of the poll that confirmed it), on the monotonic
   * clock: a wall clock set back (NTP stepping it, a virtual machine resumed) must not stretch the revocation bound.
   */
  private confirmedAt = -Infinity;
  private failure: { problem: string; since: string } | null = null;
  /** A failure only a restart ends (noteLasting): the copy is never confirmed again. */
  private lasting = false;
  private closed = false;
  /** Whether this process enforces the staleness bound (a serving replica) or only commits (the CLI). */
  private watching = false;
  /**
   * The CLI on a node whose daemon serves from the same data directory: the daemon keeps the copy, and tells its
   * indexes of what it copies; this process only waits until the copy holds what it needs (catchUp).
   */
  private following = false;
  /** This process, as the rows it writes name it. */
  private readonly writer = `${hostname()}/${process.pid}/${randomBytes(6).toString('hex')}`;

  private constructor(
    private readonly options: PostgresOptions,
    private readonly local: LocalCopy,
    private readonly log: (level: 'info' | 'warn' | 'error', message: string, detail?: object) => void,
  ) {
    this.pool = new pg.Pool({ ...connectionConfig(options, 'sovereign'), max: options.poolSize ?? 4, idleTimeoutMillis: 30_000 });
    // An idle connection that breaks (PostgreSQL restarted) is replaced on the next query; it must not end the process.
    this.pool.on('error', (err) => this.noteFailure(err));
  }

  /**
   * Connects, checks the schema, and brings the local copy up to date: from nothing (`fresh`, a replica starting: its
   * copy is rebuilt, so nothing removed while it was away survives in it) or from where it stands (the CLI).
   */
  static async open(
    options: PostgresOptions,
    local: LocalCopy,
    log: PostgresState['log'],
    mode: { rebuild: boolean; watch: boolean; follow?: boolean },
  ): Promise<PostgresState> {
    const state = new PostgresState(options, local, log);
    state.following = mode.follow === true;
    try {
      const version = await schemaVersion(state.pool).catch((err: unknown) => {
        throw new Error(`cannot reach PostgreSQL at ${options.url}: ${(err as Error).message}`);
      });
      const problem = schemaProblem(version);
      if (problem) throw new Error(problem);
      if (mode.rebuild) local.clear();
      const started = performance.now();
      await state.catchUp();
      state.confirmedAt = started;
      if (mode.watch) await state.watch();
    } catch (err) {
      await state.close();
      throw err;
    }
    return state;
  }

  /** The pool, for `sovereign db` commands. */
  get database(): pg.Pool {
    return this.pool;
  }

  /**
   * Runs `fn` on the local copy, then commits its writes in PostgreSQL if nothing it read has changed there since the
   * copy was taken; otherwise brings the copy up to date and runs it again. Resolves once committed and copied here.
   */
  async update<T>(fn: (tx: Tx) => T, local?: (result: T) => void): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const snapshot = this.local.applied();
      const { result, reads, writes } = this.run(fn);
      if (writes.size === 0) {
        local?.(result);
        return result;
      }
      let committed: boolean;
      try {
        committed = await this.commit(snapshot, reads, [...writes.values()]);
      } catch (err) {
        if (!unavailable(err)) throw err;
        this.noteFailure(err);
        throw new SharedStateUnavailable(describe(err), { cause: err });
      }
      if (committed) local?.(result);
      await this.catchUp().catch((err: unknown) => this.noteFailure(err));
      if (committed) return result;
      if (attempt >= ATTEMPTS) throw new Error(`a change of the shared state conflicted ${ATTEMPTS} times in a row; retry it`);
    }
  }

  /** `fn` against the copy, with its writes held back and its reads noted. */
  private run<T>(fn: (tx: Tx) => T): { result: T; reads: Set<string>; writes: Map<string, Write> } {
    const reads = new Set<string>();
    const writes = new Map<string, Write>();
    const shared = (space: string) => {
      if (!this.local.isShared(space)) throw new Error(`'${space}' is not part of the shared state`);
    };
    const tx: Tx = {
      get: <V>(space: string, key: Key) => {
        shared(space);
        const id = idOf(space, key);
        const write = writes.get(id);
        if (write?.kind === 'put') return write.value as V;
        if (write?.kind === 'remove') return undefined;
        reads.add(id);
        const stored = this.local.get(space, key) as V | undefined;
        return write?.kind === 'add' ? (addCounts(stored as object | undefined, write.counts!) as V) : stored;
      },
      range: <V>(space: string, options: RangeOptions = {}) => {
        shared(space);
        return this.local.range(space, options) as Iterable<{ key: Key; value: V }>;
      },
      put: (space, key, value) => {
        shared(space);
        writes.set(idOf(space, key), { space, key, kind: 'put', value });
      },
      remove: (space, key) => {
        shared(space);
        writes.set(idOf(space, key), { space, key, kind: 'remove' });
      },
      add: (space, key, counts) => {
        shared(space);
        const id = idOf(space, key);
        const write = writes.get(id);
        if (write?.kind === 'put') write.value = addCounts(write.value as object | undefined, counts);
        else if (write?.kind === 'add') write.counts = addCounts(write.counts, counts);
        else writes.set(id, { space, key, kind: 'add', counts: { ...counts } });
      },
    };
    return { result: fn(tx), reads, writes };
  }

  /**
   * Commits a change in PostgreSQL; false when a record it read at `snapshot` has changed since (nothing of it is
   * written). Changes made while a commit is under way wait and go together in the next one: commits hold the head
   * row until PostgreSQL has flushed them, so one transaction of many changes costs one flush, not one each.
   */
  private commit(snapshot: number, reads: Set<string>, writes: Write[]): Promise<boolean> {
    // Packed now, as the change was made: a value that cannot be packed fails its own change, not the others
    // committed with it, and the batch knows its size.
    let bytes = 0;
    for (const w of writes) {
      // undefined is stored as none (a removal), as before.
      if (w.kind === 'put' && w.value !== undefined) w.packed = pack(w.value);
      bytes += (w.packed?.length ?? 16) + w.space.length + 16;
    }
    return new Promise((resolve, reject) => {
      this.queued.push({ snapshot, reads, writes, bytes, resolve, reject });
      this.flushQueue();
    });
  }

  private readonly queued: Pending[] = [];
  private committing = false;

  private flushQueue(): void {
    if (this.committing || this.queued.length === 0) return;
    this.committing = true;
    let take = 1;
    for (let bytes = this.queued[0]!.bytes; take < Math.min(this.queued.length, MAX_BATCH); take++) {
      bytes += this.queued[take]!.bytes;
      if (bytes > MAX_BATCH_BYTES) break;
    }
    const batch = this.queued.splice(0, take);
    this.commitBatch(batch)
      .then(
        (committed) => batch.forEach((change, i) => change.resolve(committed[i]!)),
        (err: unknown) => batch.forEach((change) => change.reject(err)),
      )
      .finally(() => {
        this.committing = false;
        this.flushQueue();
      });
  }

  /**
   * One PostgreSQL transaction for `batch`, in order: a change whose reads changed since its snapshot (in PostgreSQL,
   * or by a change before it in the batch) is left out (false); the others are written, each record once, numbered
   * in the order they were made.
   */
  private async commitBatch(batch: Pending[]): Promise<boolean[]> {
    const client = await this.pool.connect();
    let broken = false;
    try {
      await client.query('BEGIN');
      const head = Number((await client.query<{ seq: string }>('SELECT seq FROM state_head FOR UPDATE')).rows[0]!.seq);
      // Where a record read, or added to, stands now: its number, and for additions its value.
      const look = new Set<string>();
      for (const change of batch) {
        if (head > change.snapshot) for (const id of change.reads) look.add(id);
        for (const w of change.writes) if (w.kind === 'add') look.add(idOf(w.space, w.key));
      }
      const numbered = new Map<string, number>();
      const current = new Map<string, unknown>();
      if (look.size > 0) {
        const spaces: string[] = [];
        const keys: string[] = [];
        for (const id of look) {
          const cut = id.indexOf('\u0000');
          spaces.push(id.slice(0, cut));
          keys.push(id.slice(cut + 1));
        }
        const { rows } = await client.query<{ space: string; key: string; value: Buffer | null; seq: string }>(
          `SELECT s.space, s.key, s.value, s.seq FROM state s JOIN unnest($1::text[], $2::text[]) AS r(space, key) USING (space, key)`,
          [spaces, keys],
        );
        for (const row of rows) {
          const id = `${row.space}\u0000${row.key}`;
          numbered.set(id, Number(row.seq));
          current.set(id, row.value ? (unpack(row.value) as unknown) : undefined);
        }
      }
      const written = new Map<string, { space: string; key: Key; value: Buffer | null }>();
      const committed = batch.map((change) => {
        for (const id of change.reads) if ((numbered.get(id) ?? 0) > change.snapshot || written.has(id)) return false;
        for (const w of change.writes) {
          const id = idOf(w.space, w.key);
          let value: Buffer | null = null;
          if (w.kind === 'put') {
            current.set(id, w.value);
            value = w.packed ?? null;
          } else if (w.kind === 'add') {
            const sum = addCounts(current.get(id) as object | undefined, w.counts!);
            current.set(id, sum);
            value = pack(sum);
          } else current.set(id, undefined);
          // Numbered after every record written before it, even one it writes again.
          written.delete(id);
          written.set(id, { space: w.space, key: w.key, value });
        }
        return true;
      });
      if (written.size === 0) {
        await client.query('ROLLBACK');
        return committed;
      }
      const rows = [...written.values()];
      // Some rows a statement, numbered on from the last.
      for (let from = 0; from < rows.length;) {
        let to = from + 1;
        for (let bytes = rows[from]!.value?.length ?? 0; to < rows.length; to++) {
          bytes += rows[to]!.value?.length ?? 0;
          if (bytes > STATEMENT_BYTES) break;
        }
        const slice = rows.slice(from, to);
        await client.query(
          `INSERT INTO state (space, key, value, seq, writer)
           SELECT space, key, value, $4 + n, $5 FROM unnest($1::text[], $2::text[], $3::bytea[]) WITH ORDINALITY AS w(space, key, value, n)
           ON CONFLICT (space, key) DO UPDATE SET value = EXCLUDED.value, seq = EXCLUDED.seq, writer = EXCLUDED.writer, written_at = now()`,
          [slice.map((r) => r.space), slice.map((r) => JSON.stringify(r.key)), slice.map((r) => r.value), head + from, this.writer],
        );
        from = to;
      }
      const next = head + rows.length;
      await client.query('UPDATE state_head SET seq = $1', [next]);
      await client.query('SELECT pg_notify($1, $2)', [CHANNEL, String(next)]);
      await client.query('COMMIT');
      return committed;
    } catch (err) {
      broken = true;
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      // A connection that failed mid-transaction is not given back to the pool: it may be half-open.
      client.release(broken);
    }
  }

  /**
   * A catch-up that starts after this call: joined by every call made before it starts, so a flood of lookups that
   * miss (unknown keys) costs PostgreSQL one query at a time.
   */
  refresh(): Promise<void> {
    if (!this.nextRefresh) {
      const run: Promise<void> = this.catchUp(() => {
        if (this.nextRefresh === run) this.nextRefresh = null;
      }).catch((err: unknown) => {
        if (!unavailable(err)) throw err;
        this.noteFailure(err);
        throw new SharedStateUnavailable(describe(err), { cause: err });
      });
      this.nextRefresh = run;
    }
    return this.nextRefresh;
  }

  private nextRefresh: Promise<void> | null = null;

  /** Copies every change above what the copy holds; one at a time, in order. */
  catchUp(onStart?: () => void): Promise<void> {
    const run = this.catching.then(async () => {
      onStart?.();
      if (this.following) return this.awaitDaemon();
      // A copy made from nothing needs no removal: what was removed before it copied a record is not there to copy.
      let fromNothing = this.local.applied() === 0;
      for (;;) {
        const from = this.local.applied();
        // At most PAGE rows, and no more than PAGE_BYTES of values past the first row (octet_length reads no value);
        // with the highest change number purged, as of the same snapshot.
        const { rows: page } = await this.pool.query<{
          purged: string;
          head: string;
          space: string;
          key: string;
          value: Buffer | null;
          seq: string | null;
          writer: string;
          fetched: string;
        }>(
          `WITH next AS (
             SELECT seq, coalesce(octet_length(value), 0) AS size FROM state WHERE seq > $1 ORDER BY seq LIMIT $2
           ), sized AS (
             SELECT seq, sum(size) OVER (ORDER BY seq) - size AS before, count(*) OVER () AS fetched FROM next
           ), page AS (
             SELECT s.space, s.key, s.value, s.seq, s.writer, sized.fetched FROM sized JOIN state s ON s.seq = sized.seq
             WHERE sized.before <= $3
           )
           SELECT (SELECT seq FROM state_purged) AS purged, (SELECT seq FROM state_head) AS head, page.*
           FROM (VALUES (1)) AS one LEFT JOIN page ON true ORDER BY page.seq`,
          [from, PAGE, PAGE_BYTES],
        );
        const purged = Number(page[0]!.purged);
        if (!fromNothing && Number(page[0]!.head) < from) {
          if (this.watching) throw new CopyAhead(from, Number(page[0]!.head));
          this.local.clear();
          fromNothing = true;
          continue;
        }
        if (!fromNothing && purged > from) {
          // Removals this copy has not seen may be purged (before this catch-up, or during it, between two pages): it
          // cannot be brought up to date, only rebuilt.
          if (this.watching) throw new CopyTooOld(from, purged);
          this.local.clear();
          fromNothing = true;
          continue;
        }
        const rows = page.filter((row): row is typeof row & { seq: string } => row.seq !== null);
        // Fewer than asked for, and none left out for their size: there are no more, and the copy then holds every
        // change up to the head, though the last ones left no row (removals since purged).
        const last = rows.length === 0 || (rows.length === Number(rows[0]!.fetched) && rows.length < PAGE);
        const to = last ? Number(page[0]!.head) : Number(rows[rows.length - 1]!.seq);
        if (rows.length === 0 && to <= from) return;
        const known = rows.filter((row) => this.local.isShared(row.space));
        this.local.apply(
          known.map((row) => ({
            space: row.space,
            key: JSON.parse(row.key) as Key,
            value: row.value ? (unpack(row.value) as unknown) : undefined,
            theirs: row.writer !== this.writer,
          })),
          to,
        );
        if (last) return;
      }
    });
    this.catching = run.catch(() => {});
    return run;
  }

  /** Waits (at most FOLLOW_MS) until the daemon's copy holds every change PostgreSQL has now. */
  private async awaitDaemon(): Promise<void> {
    const { rows } = await this.pool.query<{ seq: string }>('SELECT seq FROM state_head');
    const head = Number(rows[0]!.seq);
    for (const until = Date.now() + FOLLOW_MS; this.local.applied() < head;) {
      if (Date.now() > until) {
        throw new Error(
          `the daemon serving from this data directory has not copied the shared state's change ${head} within ${FOLLOW_MS / 1000} s (it holds ${this.local.applied()}): is it connected to PostgreSQL? GET /readyz says`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Starts following PostgreSQL: notifications and the poll, and the staleness bound on `assertFresh`. */
  private async watch(): Promise<void> {
    this.watching = true;
    await this.listen().catch((err: unknown) => this.noteFailure(err));
    this.pollTimer = setInterval(() => this.poll(), POLL_MS);
    this.pollTimer.unref();
    this.purgeTimer = setInterval(() => {
      this.purge().catch((err: unknown) =>
        this.log('warn', 'removed records could not be purged; trying again later', { err: (err as Error).message }),
      );
    }, PURGE_MS);
    this.purgeTimer.unref();
  }

  private async listen(): Promise<void> {
    if (this.closed) return;
    // No query timeout: this connection waits for notifications as long as it stands.
    const client = new pg.Client({ ...connectionConfig(this.options, 'sovereign-listen'), query_timeout: undefined });
    const lost = (err?: unknown) => {
      if (this.listener !== client) return;
      this.listener = null;
      client.end().catch(() => {});
      if (err) this.noteFailure(err);
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', () => this.poll());
    try {
      await client.connect();
      await client.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      await client.end().catch(() => {});
      throw err;
    }
    this.listener = client;
  }

  /** Reads the newest change number and copies up to it; a success confirms the copy as of the poll's start. */
  private poll(): void {
    if (this.closed || this.lasting) return;
    if (this.polling) {
      this.pollAgain = true;
      return;
    }
    const started = performance.now();
    this.polling = (async () => {
      try {
        if (!this.listener) await this.listen();
        const { rows } = await this.pool.query<{ seq: string }>('SELECT seq FROM state_head');
        const head = Number(rows[0]!.seq);
        if (head < this.local.applied()) throw new CopyAhead(this.local.applied(), head);
        if (head > this.local.applied()) await this.catchUp();
        this.confirmedAt = started;
        if (this.failure) {
          this.log('info', 'PostgreSQL answers again; the shared state is current', { down_since: this.failure.since });
          this.failure = null;
        }
      } catch (err) {
        if (err instanceof CopyTooOld || err instanceof CopyAhead) this.noteLasting(err.message);
        else this.noteFailure(err);
      } finally {
        this.polling = null;
        if (this.pollAgain) {
          this.pollAgain = false;
          this.poll();
        }
      }
    })();
  }

  /** A failure only a restart ends: the replica stays unready (503), and says so once. */
  private noteLasting(problem: string): void {
    this.lasting = true;
    if (this.failure?.problem === problem) return;
    this.failure = { problem, since: new Date().toISOString() };
    this.log('error', problem);
  }

  /** Purges removed records older than TOMBSTONE_HOURS, noting the highest change number purged. */
  private async purge(): Promise<void> {
    await this.pool.query(
      `WITH gone AS (DELETE FROM state WHERE value IS NULL AND written_at < now() - make_interval(hours => $1) RETURNING seq)
       UPDATE state_purged SET seq = GREATEST(seq, (SELECT coalesce(max(seq), 0) FROM gone))`,
      [TOMBSTONE_HOURS],
    );
  }

  private noteFailure(err: unknown): void {
    if (this.closed) return;
    if (!this.failure) {
      this.failure = { problem: describe(err), since: new Date().toISOString() };
      this.log('error', 'PostgreSQL does not answer; calls that need the shared state get 503 until it does', {
        err: (err as Error).message,
      });
    }
  }

  /**
   * Why the copy cannot be trusted now, or null when it can: a serving replica that has not confirmed its copy within
   * STALE_MS. Health reports it; authentication refuses to run on it.
   */
  staleness(now = performance.now()): { problem: string; since: string } | null {
    if (!this.watching || now - this.confirmedAt <= STALE_MS) return null;
    const unseen = Math.round(now - this.confirmedAt);
    return {
      problem: `${this.failure?.problem ?? 'PostgreSQL has not confirmed the shared state'}; this replica has not seen its changes for ${unseen} ms, so it authenticates no call until it does (a key revoked elsewhere must not work here)`,
      since: this.failure?.since ?? new Date(Date.now() - (Number.isFinite(unseen) ? unseen - STALE_MS : 0)).toISOString(),
    };
  }

  /** Throws SharedStateUnavailable while the copy cannot be trusted (`now` on the monotonic clock, performance.now). */
  assertFresh(now = performance.now()): void {
    if (this.watching && now - this.confirmedAt > STALE_MS) throw new SharedStateUnavailable(this.staleness(now)!.problem);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.purgeTimer) clearInterval(this.purgeTimer);
    await this.polling;
    await this.catching;
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => {});
    await this.pool.end().catch(() => {});
  }
}
