// The batch runner: runs the lines of the batches that have not ended, `parallel` at a time across all of them, each
// as a call of the key that made its batch, through the daemon's own pipeline and route (the caller it is given is
// fastify's inject with an in-process credential: auth/internal.ts). So a line meets what an interactive call meets:
// the key's and project's limits, the engines, the answer's scrubbing, and its own audit entry.
//
// Resumable: a line's answer, its mark and the batch's counts are written in one transaction (store.ts), so a restart,
// even after kill -9, finds every line either done once or not done. The lines not done run then; a line that was
// running when the process died runs again, since nothing of it was recorded (its first run's audit entry stays in the
// log, so such a line has an entry for each run).
//
// Refusals of capacity or limits (429, 503) are not answers: the line is tried again after the wait the refusal asks
// for, up to MAX_ATTEMPTS times, after which that refusal is its answer. Projects take turns line by line, then their
// batches within each: one large batch does not hold back the others, nor do many batches of one project. Lines carry `service_tier: "flex"`: the scheduler runs them in the room that
// interactive calls leave.
//
// With replicas (store: postgres), a runner runs the batches whose lease it holds (leases.ts). It looks every second,
// and whenever a batch is made or cancelled here or through another replica: it renews its leases, takes its own
// back after a restart, and takes a batch no one holds (new, or its holder's lease ran out) when it has a worker free,
// or once the batch has waited a moment (2 s) all the same: a new batch goes to a replica with room for it if there is
// one, and is run somewhere in any case.
import { randomBytes } from 'node:crypto';
import type { FileStore } from './files.js';
import type { BatchUrl } from './jsonl.js';
import type { BatchLeases } from './leases.js';
import type { BatchError, BatchRecord, BatchStore, FinalStatus } from './store.js';

/** One line's call, as the key that made its batch. */
export interface LineCall {
  keyId: string;
  projectId: string;
  url: BatchUrl;
  body: Record<string, unknown>;
}

/** Its answer: the status, the X-Request-Id, the body (parsed JSON), and a refusal's Retry-After. */
export interface LineAnswer {
  status: number;
  requestId: string | null;
  body: unknown;
  retryAfterSeconds: number | null;
}

export type LineCaller = (call: LineCall) => Promise<LineAnswer>;

export interface RunnerLog {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  error(fields: object, message: string): void;
}

export interface RunnerOptions {
  batches: BatchStore;
  files: FileStore;
  log: RunnerLog;
  /** Lines run at once, across every batch (batches.parallel). */
  parallel: number;
  /** With replicas (store: postgres): the leases that say which replica runs a batch; null or absent on lmdb. */
  leases?: BatchLeases | null;
  now?: () => number;
  /** Waits between attempts of a refused line (tests shorten them). */
  backoffMs?: { min: number; max: number };
}

/** Tries of a line refused for capacity or limits before that refusal is its answer. */
const MAX_ATTEMPTS = 10;
/** How often progress is logged while a batch runs. */
const PROGRESS_MS = 5_000;
/** Lines marked per transaction when a batch ends before running them. */
const MARK_CHUNK = 500;
/** How often an idle worker looks again while batches wait (a refusal's wait, a completion window's end). */
const IDLE_LOOK_MS = 1_000;

/** A batch being run: which line comes next, which are running, which wait to be tried again. */
interface Running {
  id: string;
  project: string;
  next: number;
  running: Set<number>;
  retry: number[];
  attempts: Map<number, number>;
  /** Not before this time (ms) is another of its lines started: a refusal asked to wait. */
  waitUntil: number;
  ending: boolean;
  lastLog: number;
}

const TRANSIENT = (status: number) => status === 429 || status === 503;

/** What the error file says of a line its batch ended without running. */
const NOT_RUN_BECAUSE: Record<Exclude<FinalStatus, 'completed'>, { code: string; message: string }> = {
  cancelled: { code: 'batch_cancelled', message: 'This request was not run: its batch was cancelled first.' },
  expired: { code: 'batch_expired', message: "This request could not be run before the batch's completion window ended." },
  failed: { code: 'batch_failed', message: 'This request was not run: its batch failed (its errors say why).' },
};

export class BatchRunner {
  private readonly batches: BatchStore;
  private readonly files: FileStore;
  private readonly log: RunnerLog;
  private readonly now: () => number;
  private readonly backoff: { min: number; max: number };
  private readonly running = new Map<string, Running>();
  /** When each project last had a line started (a count of picks): projects take turns, whatever their batches. */
  private readonly served = new Map<string, number>();
  private picks = 0;
  private call: LineCaller | null = null;
  private workers: Array<Promise<void>> = [];
  private wakeUp: (() => void) | null = null;
  private wakeSignal: Promise<void> = Promise.resolve();
  private stopping = false;
  /** Set once stop() gave up waiting: an answer that arrives later is not recorded (the line runs again next start). */
  private closed = false;
  /** Picks are made one at a time: a pick may await a write. */
  private picking: Promise<unknown> = Promise.resolve();
  private readonly leases: BatchLeases | null;
  /** With leases: the batches this replica holds, and when each lease runs out. */
  private readonly held = new Map<string, number>();
  /** With leases: batches no one holds, and since when this replica has seen them so (busy, it waits a moment). */
  private readonly waiting = new Map<string, number>();
  private tendTimer: NodeJS.Timeout | null = null;
  private tending: Promise<void> | null = null;
  private tendAgain = false;
  private tended = false;
  private leaseTrouble = false;

  constructor(private readonly options: RunnerOptions) {
    this.batches = options.batches;
    this.files = options.files;
    this.log = options.log;
    this.now = options.now ?? Date.now;
    this.backoff = options.backoffMs ?? { min: 1_000, max: 60_000 };
    this.leases = options.leases ?? null;
    this.resetWake();
    this.batches.onChange(() => {
      this.wake();
      this.tendSoon();
    });
  }

  /** Resumes the batches that have not ended and starts the workers; `call` runs one line. */
  start(call: LineCaller): void {
    this.call = call;
    if (this.leases) {
      // The batches this replica held before a restart, and those no one holds, are taken at the first look.
      this.tendSoon();
      this.tendTimer = setInterval(() => this.tendSoon(), this.leases.lookMs);
      this.tendTimer.unref();
    } else {
      const resumed = this.batches.unfinished();
      for (const record of resumed) this.track(record);
      this.resumed(resumed);
    }
    for (let i = 0; i < this.options.parallel; i++) this.workers.push(this.work());
  }

  private resumed(records: readonly BatchRecord[]): void {
    if (!records.length) return;
    this.log.info({ batches: records.map((r) => ({ batch: r.id, done: r.completed + r.failed, total: r.total })) }, 'batches resumed');
  }

  /**
   * Starts no more lines and waits for those in progress, up to `graceMs`; an answer that comes later is not recorded
   * (its line runs again at the next start).
   */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    this.wake();
    let timer: NodeJS.Timeout | undefined;
    const graceOver = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs);
    });
    await Promise.race([Promise.all(this.workers), graceOver]);
    clearTimeout(timer);
    this.closed = true;
    if (this.tendTimer) clearInterval(this.tendTimer);
    await this.tending;
    if (this.leases && this.held.size) {
      // Another replica may take them at once; a line still running here is not recorded (closed), so it runs there.
      const held = [...this.held.keys()];
      this.held.clear();
      await this.leases.release(held).catch((err: Error) => {
        this.log.warn(
          { batches: held, err: err.message },
          'the batch leases could not be let go; other replicas take them once they run out',
        );
      });
    }
  }

  /** Whether this runner runs the batch: always on lmdb; with leases, while it holds the batch's. */
  private holds(id: string): boolean {
    return !this.leases || (this.held.get(id) ?? 0) > this.now();
  }

  /** Lines running now, across every batch. */
  private inFlight(): number {
    let n = 0;
    for (const state of this.running.values()) n += state.running.size;
    return n;
  }

  /** A look at the leases now, or right after the one under way. */
  private tendSoon(): void {
    if (!this.leases || !this.call || this.stopping) return;
    if (this.tending) {
      this.tendAgain = true;
      return;
    }
    this.tending = this.tend()
      .then(
        () => {
          if (this.leaseTrouble) this.log.info({}, 'the batch leases are renewed again');
          this.leaseTrouble = false;
        },
        (err: Error) => {
          // Once per failure, not every second: the leases run out meanwhile, and another replica may take the batches.
          if (!this.leaseTrouble)
            this.log.error({ err: err.message }, 'the batch leases could not be renewed or taken; tried again every second');
          this.leaseTrouble = true;
        },
      )
      .finally(() => {
        this.tending = null;
        if (this.tendAgain) {
          this.tendAgain = false;
          this.tendSoon();
        }
      });
  }

  /**
   * Renews the leases this replica holds that are due, and takes those of batches it should run: its own from before
   * a restart at once; one that no one holds when a worker is free, and any such once it has waited `takeWhenBusyMs`.
   */
  private async tend(): Promise<void> {
    const leases = this.leases!;
    const now = this.now();
    const want: string[] = [];
    for (const [id, until] of this.held) if (leases.due(until, now)) want.push(id);
    const busy = this.inFlight() >= this.options.parallel;
    let taking = 0;
    const unheld = new Set<string>();
    const records = new Map<string, BatchRecord>();
    for (const record of this.batches.unfinished()) {
      if (this.held.has(record.id)) continue;
      records.set(record.id, record);
      const lease = leases.lease(record.id);
      if (lease?.holder === leases.holder) {
        want.push(record.id);
        continue;
      }
      if (lease && lease.until > now) continue;
      unheld.add(record.id);
      const since = this.waiting.get(record.id) ?? now;
      this.waiting.set(record.id, since);
      if ((!busy && taking === 0) || now - since >= leases.takeWhenBusyMs) {
        want.push(record.id);
        taking++;
      }
    }
    for (const id of this.waiting.keys()) if (!unheld.has(id)) this.waiting.delete(id);
    if (!want.length) {
      this.tended = true;
      return;
    }
    const taken = await leases.hold(want);
    const first = !this.tended;
    this.tended = true;
    const resumed: BatchRecord[] = [];
    for (const id of want) {
      const lease = taken.get(id);
      // A batch that ended meanwhile (here: its end let the lease go) is no longer held.
      if (!lease || this.batches.ended(id)) {
        if (this.held.delete(id) && !this.batches.ended(id)) {
          this.log.warn({ batch: id }, 'another replica runs the batch now (this one could not renew its lease in time)');
        }
        continue;
      }
      this.held.set(id, lease.until);
      this.waiting.delete(id);
      const record = records.get(id);
      if (!record) continue;
      if (first) resumed.push(record);
      else if (lease.from) this.log.info({ batch: id, from: lease.from }, 'batch taken over from a replica whose lease ran out');
    }
    this.resumed(resumed);
    if ([...records.keys()].some((id) => this.held.has(id))) this.wake();
  }

  private wake(): void {
    this.wakeUp?.();
    this.resetWake();
  }

  private resetWake(): void {
    this.wakeSignal = new Promise<void>((resolve) => {
      this.wakeUp = resolve;
    });
  }

  private track(record: BatchRecord): Running {
    let state = this.running.get(record.id);
    if (!state) {
      state = {
        id: record.id,
        project: record.project,
        next: 0,
        running: new Set(),
        retry: [],
        attempts: new Map(),
        waitUntil: 0,
        ending: false,
        lastLog: 0,
      };
      this.running.set(record.id, state);
    }
    return state;
  }

  /** One worker: takes the next line of any batch and runs it, until the runner stops. */
  private async work(): Promise<void> {
    while (!this.stopping) {
      let job: { batch: BatchRecord; index: number } | null;
      // Taken before the pick: a wake while it runs (a batch made meanwhile, a lease taken) is not missed.
      const woken = this.wakeSignal;
      try {
        job = await this.pickInTurn();
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'the batch runner could not read or write its state; it tries again');
        job = null;
      }
      if (this.stopping) break;
      if (!job) {
        await this.idle(woken);
        continue;
      }
      await this.runLine(job.batch, job.index).catch((err: Error) => {
        this.log.error({ batch: job.batch.id, err: err.message }, 'a batch line could not be recorded; it runs again');
        const state = this.running.get(job.batch.id);
        if (state) {
          state.running.delete(job.index);
          state.retry.push(job.index);
          state.waitUntil = this.now() + this.backoff.min;
        }
      });
    }
  }

  /**
   * Waits for a wake since `woken` was taken (a batch made or cancelled, a lease taken), or until a waiting batch may
   * go on, or for IDLE_LOOK_MS.
   */
  private async idle(woken: Promise<void>): Promise<void> {
    if (!this.running.size) return woken;
    const now = this.now();
    let ms = IDLE_LOOK_MS;
    for (const state of this.running.values()) if (state.waitUntil > now) ms = Math.min(ms, state.waitUntil - now);
    let timer: NodeJS.Timeout | undefined;
    const looks = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, ms);
    });
    await Promise.race([woken, looks]);
    clearTimeout(timer);
  }

  private pickInTurn(): Promise<{ batch: BatchRecord; index: number } | null> {
    const picked = this.picking.then(() => this.pick());
    this.picking = picked.catch(() => {});
    return picked;
  }

  /**
   * The next line to run, taking the batches in turn; on the way, batches the store lists that the runner does not
   * know yet are taken up, and batches whose lines are all done (or that were cancelled or expired) are ended.
   */
  private async pick(): Promise<{ batch: BatchRecord; index: number } | null> {
    if (this.stopping) return null;
    for (const record of this.batches.unfinished()) if (this.holds(record.id)) this.track(record);
    // The project served longest ago goes first, then, within it, the batch after the last one served: projects take
    // turns, so one that makes many batches gets no more of the runner than one that makes a single batch.
    const turn = (state: Running) => this.served.get(state.project) ?? -1;
    const order = [...this.running.values()].sort((a, b) => turn(a) - turn(b));
    for (const state of order) {
      this.running.delete(state.id);
      this.running.set(state.id, state);
      let record = this.batches.record(state.id);
      if (!record) {
        this.running.delete(state.id);
        continue;
      }
      if (state.ending) continue;
      if (!this.holds(state.id)) {
        // Its lease ran out (or went to another replica): the lines running here finish, no other starts.
        if (!state.running.size) this.running.delete(state.id);
        continue;
      }
      const stopWith = this.stopReason(record);
      if (stopWith) {
        if (!state.running.size) await this.end(record, state, stopWith);
        continue;
      }
      if (state.waitUntil > this.now()) continue;
      const index = this.nextLine(record, state);
      if (index === null) {
        if (!state.running.size && !state.retry.length) await this.end(record, state, 'completed');
        continue;
      }
      if (record.status === 'validating') {
        record = await this.batches.started(record.id);
        this.log.info({ batch: record.id, project: record.project, total: record.total }, 'batch started');
      }
      state.running.add(index);
      this.served.set(state.project, ++this.picks);
      return { batch: record, index };
    }
    return null;
  }

  /** Why the batch must stop starting lines: cancelled, or its completion window is over. */
  private stopReason(record: BatchRecord): FinalStatus | null {
    if (record.status === 'cancelling') return 'cancelled';
    if (record.status === 'finalizing') return 'completed';
    if (this.now() >= record.expiresAt * 1000) return 'expired';
    return null;
  }

  private nextLine(record: BatchRecord, state: Running): number | null {
    const retried = state.retry.shift();
    if (retried !== undefined) return retried;
    while (state.next < record.total && (state.running.has(state.next) || this.batches.isDone(record.id, state.next))) state.next++;
    return state.next < record.total ? state.next++ : null;
  }

  /** Runs line `index` of the batch and records its answer (or puts it back to be tried again). */
  private async runLine(batch: BatchRecord, index: number): Promise<void> {
    const state = this.running.get(batch.id)!;
    const text = this.files.line(batch.inputFileId, index);
    if (text === undefined) {
      // Not something a retry mends: the batch cannot go on.
      state.running.delete(index);
      const message = `Request ${index + 1} of the input file ${batch.inputFileId} is missing from the data directory; the batch cannot run it.`;
      this.log.error({ batch: batch.id, line: index + 1 }, 'a batch input line is missing; the batch fails');
      await this.end(batch, state, 'failed', [{ code: 'input_missing', message, param: 'input_file_id', line: index + 1 }]);
      return;
    }
    const line = JSON.parse(text) as { custom_id: string; url: BatchUrl; body: Record<string, unknown> };
    const answer = await this.call!({
      keyId: batch.key,
      projectId: batch.project,
      url: line.url,
      body: { ...line.body, service_tier: 'flex' },
    });
    if (this.closed) return;
    state.running.delete(index);
    const attempts = (state.attempts.get(index) ?? 0) + 1;
    if (TRANSIENT(answer.status) && attempts < MAX_ATTEMPTS && !this.stopping) {
      state.attempts.set(index, attempts);
      state.retry.push(index);
      const asked = (answer.retryAfterSeconds ?? 0) * 1000;
      const wait = Math.min(this.backoff.max, Math.max(asked, this.backoff.min * 2 ** (attempts - 1)));
      state.waitUntil = Math.max(state.waitUntil, this.now() + wait);
      return;
    }
    // Shutting down: a refusal caused by the drain is no answer; the line runs again at the next start.
    if (TRANSIENT(answer.status) && this.stopping) return;
    state.attempts.delete(index);
    const succeeded = answer.status >= 200 && answer.status < 300;
    const output = JSON.stringify({
      id: `batch_req_${randomBytes(12).toString('hex')}`,
      custom_id: line.custom_id,
      response: { status_code: answer.status, request_id: answer.requestId, body: answer.body },
      error: null,
    });
    const record = await this.batches.answered(batch.id, index, succeeded, output);
    this.progress(record, state);
  }

  private progress(record: BatchRecord, state: Running): void {
    const done = record.completed + record.failed;
    if (this.now() - state.lastLog < PROGRESS_MS && done < record.total) return;
    state.lastLog = this.now();
    this.log.info(
      { batch: record.id, project: record.project, total: record.total, completed: record.completed, failed: record.failed },
      'batch progress',
    );
  }

  /**
   * Ends the batch: lines it never ran (cancelled, expired) each get an error line saying why, then its files are made
   * and its status set. Each step is a transaction of its own and can be taken again: a crash during it is finished
   * at the next start.
   */
  private async end(record: BatchRecord, state: Running, status: FinalStatus, errors: BatchError[] | null = null): Promise<void> {
    state.ending = true;
    try {
      // `finalizing` is the way to `completed`; a batch cancelled, expired or failed keeps its status until it has ended.
      if (status === 'completed') await this.batches.finalizing(record.id);
      else await this.markNotRun(record, NOT_RUN_BECAUSE[status]);
      const ended = await this.batches.end(record.id, status, errors);
      this.running.delete(record.id);
      this.held.delete(record.id);
      if (![...this.running.values()].some((s) => s.project === record.project)) this.served.delete(record.project);
      await this.batches.forgetLines(record.id);
      this.log.info(
        { batch: ended.id, project: ended.project, status, total: ended.total, completed: ended.completed, failed: ended.failed },
        'batch ended',
      );
    } catch (err) {
      state.ending = false;
      throw err;
    }
  }

  /** Every line not done gets its line in the error file, saying why it was not run; some at a time. */
  private async markNotRun(record: BatchRecord, why: { code: string; message: string }): Promise<void> {
    const customId = (index: number) =>
      (JSON.parse(this.files.line(record.inputFileId, index) ?? '{}') as { custom_id?: string }).custom_id ?? null;
    for (let from = 0; from < record.total; from += MARK_CHUNK) {
      const indexes: number[] = [];
      for (let i = from; i < Math.min(record.total, from + MARK_CHUNK); i++) if (!this.batches.isDone(record.id, i)) indexes.push(i);
      if (!indexes.length) continue;
      await this.batches.notRun(record.id, indexes, (index) =>
        JSON.stringify({ id: `batch_req_${randomBytes(12).toString('hex')}`, custom_id: customId(index), response: null, error: why }),
      );
    }
  }
}
