// A model's slots: it serves `parallel` calls at once, and the calls that wait for a slot are ordered by the
// scheduling policy. Past a bound a call is refused at once with 503 and Retry-After rather than queued without end
// (Tessera's back-pressure, as one named error).
//
// `fair` (the default) is weighted fair queueing across projects, so that no project takes more than its share of a
// model however much it sends:
// - each project has a virtual time, the slot time it has used divided by its weight; a free slot goes to the waiting
//   project whose virtual time is least (a project that comes back after a pause starts from the least of the others,
//   so it cannot bank what it did not use);
// - within a project, `priority` calls go before `default` ones (OpenAI's service_tier);
// - a project may hold its weighted share of the slots among the projects active now or in the last RECENT_MS (at
//   least one), and more only while the others do not claim theirs; a project that has just finished a call keeps one
//   slot for its next call, so a project that sends one call after another never waits behind another project's long
//   generations;
// - `flex` work (batches) runs in the capacity interactive calls leave: only when no interactive call waits, and on at
//   most all slots but one, so that an interactive call never waits behind a whole model of batch work;
// - each project may have `queue` calls waiting.
// `fifo` is one queue in arrival order, at most `queue` long: how the daemon scheduled before, kept to compare with.
import { ApiError } from '../errors/index.js';
import type { CallTicket, QueueState, SchedulingPolicy, ServiceTier } from './types.js';

export const SERVICE_TIERS: readonly ServiceTier[] = ['priority', 'default', 'flex'];

export interface SlotsOptions {
  parallel: number;
  /**
   * Slots beyond `parallel` (fair policy), each only for an interactive call of a project that holds no slot: a
   * project's call never waits behind another project's generations, and one project alone still has `parallel`.
   */
  guests?: number;
  /** Calls that may wait: per project (fair), in all (fifo). */
  queue: number;
  /** Names the model in a refusal: "The model 'x'". */
  label: string;
  policy?: SchedulingPolicy;
  /** What a refused call is told to wait, in seconds. */
  retryAfterSeconds?: number;
  /** How long a project counts as active after its last call ended (RECENT_MS). */
  recentMs?: number;
  now?: () => number;
}

/** How long a project counts as active after its last call ended: its share of the slots is kept that long. */
export const RECENT_MS = 1000;
/** Projects idle this long are forgotten (their virtual time would be raised on return anyway). */
const FORGET_MS = 60_000;
/** A call's expected slot time before its project has a history. */
const FIRST_HOLD_MS = 100;

const ANONYMOUS: CallTicket = { project: '', weight: 1, tier: 'default' };

interface Waiting {
  ticket: CallTicket;
  since: number;
  grant: () => void;
  signal: AbortSignal;
  onAbort: () => void;
}

interface ProjectState {
  weight: number;
  held: number;
  /** Waiting calls by tier, each in arrival order. */
  queues: Record<ServiceTier, Waiting[]>;
  virtualTime: number;
  /** Slot time per call, a moving average: what a grant is charged before the call's own time is known. */
  holdMs: number;
  lastEnded: number;
}

export class Slots {
  private readonly parallel: number;
  private readonly guests: number;
  private readonly queue: number;
  private readonly label: string;
  private readonly policy: SchedulingPolicy;
  private readonly retryAfterSeconds: number;
  private readonly recentMs: number;
  private readonly now: () => number;
  private busy = 0;
  private flexBusy = 0;
  private readonly projects = new Map<string, ProjectState>();
  /** Every waiting call in arrival order (fifo). */
  private readonly fifo: Waiting[] = [];
  private waitingCount = 0;
  /** The call being admitted by acquire(), while it is. */
  private arriving: Waiting | null = null;
  /** Set while a slot is kept for a project that was active a moment ago: when that lapses, the slot is given out. */
  private lapse: NodeJS.Timeout | undefined;

  constructor(options: SlotsOptions) {
    this.parallel = options.parallel;
    this.guests = options.policy === 'fifo' ? 0 : (options.guests ?? 0);
    this.queue = options.queue;
    this.label = options.label;
    this.policy = options.policy ?? 'fair';
    this.retryAfterSeconds = options.retryAfterSeconds ?? 1;
    this.recentMs = options.recentMs ?? RECENT_MS;
    this.now = options.now ?? Date.now;
  }

  /**
   * Resolves with a release function once the call has a slot (and sets `ticket.waitedMs`); rejects with 503 when its
   * project's queue (fifo: the queue) is full, or with the signal's reason if the caller aborts first.
   */
  acquire(signal: AbortSignal, ticket: CallTicket = ANONYMOUS): Promise<() => void> {
    if (signal.aborted) return Promise.reject(signal.reason as Error);
    const project = this.policy === 'fair' ? this.project(ticket) : null;
    const waitingThere = project ? count(project) : this.fifo.length;
    return new Promise((resolve, reject) => {
      const waiting: Waiting = {
        ticket,
        since: this.now(),
        signal,
        grant: () => {
          signal.removeEventListener('abort', waiting.onAbort);
          resolve(this.releaser(waiting));
        },
        onAbort: () => {
          if (!this.remove(waiting)) return;
          reject(signal.reason as Error);
          this.dispatch();
        },
      };
      signal.addEventListener('abort', waiting.onAbort, { once: true });
      if (project) project.queues[ticket.tier].push(waiting);
      else this.fifo.push(waiting);
      this.waitingCount++;
      // Granted here and now, a call did not wait, whatever the clock read between.
      this.arriving = waiting;
      this.dispatch();
      this.arriving = null;
      // The bound is on calls that wait: one granted as it arrives passes even with `queue` 0.
      if (waitingThere >= this.queue && this.remove(waiting)) {
        signal.removeEventListener('abort', waiting.onAbort);
        reject(this.full(waitingThere, project !== null));
      }
    });
  }

  /** Calls running and waiting, with the waiting ones by tier: what health reports. */
  get state(): QueueState {
    const byTier = { priority: 0, default: 0, flex: 0 };
    if (this.policy === 'fifo') for (const w of this.fifo) byTier[w.ticket.tier]++;
    else for (const p of this.projects.values()) for (const tier of SERVICE_TIERS) byTier[tier] += p.queues[tier].length;
    return { busy: this.busy, waiting: this.waitingCount, byTier };
  }

  private project(ticket: CallTicket): ProjectState {
    let project = this.projects.get(ticket.project);
    if (!project) {
      project = {
        weight: ticket.weight,
        held: 0,
        queues: { priority: [], default: [], flex: [] },
        virtualTime: 0,
        holdMs: FIRST_HOLD_MS,
        lastEnded: -Infinity,
      };
      this.projects.set(ticket.project, project);
    }
    project.weight = ticket.weight;
    // Coming back after a pause, a project starts level with the least of the active others: no banked credit.
    if (!this.isActive(project, this.now())) project.virtualTime = Math.max(project.virtualTime, this.leastVirtualTime(project));
    return project;
  }

  private full(waiting: number, perProject: boolean): ApiError {
    const whose = perProject ? `with ${waiting} of this project's calls waiting` : `with ${waiting} calls waiting`;
    return new ApiError(
      'server_overloaded',
      `${this.label} is busy (${this.busy} calls running, ${whose}). Retry after the number of seconds in Retry-After.`,
      { headers: { 'retry-after': String(this.retryAfterSeconds) } },
    );
  }

  /** Gives free slots to the calls the policy puts first. */
  private dispatch(): void {
    clearTimeout(this.lapse);
    this.lapse = undefined;
    while (this.busy < this.parallel + this.guests && this.waitingCount > 0) {
      const next = this.policy === 'fifo' ? this.fifo.shift() : this.nextFair();
      if (!next) break;
      this.waitingCount--;
      this.grant(next);
    }
  }

  /**
   * The fair policy's next call: interactive work before flex, then least virtual time within the projects' caps. A
   * guest slot (past `parallel`) goes only to an interactive call of a project that holds none.
   */
  private nextFair(): Waiting | undefined {
    const now = this.now();
    const caps = this.caps(now);
    const guest = this.busy >= this.parallel;
    let best: { project: ProjectState; tier: ServiceTier } | null = null;
    let kept = false;
    for (const interactive of [true, false]) {
      if (!interactive && (guest || this.flexBusy >= Math.max(1, this.parallel - 1))) break;
      for (const project of this.projects.values()) {
        if (guest && project.held > 0) continue;
        const tier = interactive
          ? project.queues.priority.length
            ? 'priority'
            : project.queues.default.length
              ? 'default'
              : null
          : project.queues.flex.length
            ? 'flex'
            : null;
        if (!tier) continue;
        if (project.held >= caps.get(project)!) {
          kept = true;
          continue;
        }
        if (
          !best ||
          project.virtualTime < best.project.virtualTime ||
          (project.virtualTime === best.project.virtualTime && head(project, tier) < head(best.project, best.tier))
        )
          best = { project, tier };
      }
      if (best) break;
    }
    if (best) return best.project.queues[best.tier].shift();
    // Calls wait while a slot is kept for a project active a moment ago: when its time is up, the slot is given out.
    if (kept) this.scheduleLapse(now);
    return undefined;
  }

  /**
   * Each project's most slots: its weighted share among the projects active now or lately (at least one), or all the
   * slots the others do not claim, whichever is more. A project claims what it holds and waits for, up to its share;
   * one that has just finished a call claims one slot, for its next.
   */
  private caps(now: number): Map<ProjectState, number> {
    let total = 0;
    const active: ProjectState[] = [];
    for (const [name, project] of this.projects) {
      if (this.isActive(project, now)) {
        active.push(project);
        total += project.weight;
      } else if (project.lastEnded < now - FORGET_MS) this.projects.delete(name);
    }
    const share = (project: ProjectState) => Math.max(1, Math.ceil((this.parallel * project.weight) / total - 1e-9));
    const claim = (project: ProjectState) => Math.min(share(project), project.held + count(project) || 1);
    let claimed = 0;
    for (const project of active) claimed += claim(project);
    const caps = new Map<ProjectState, number>();
    for (const project of active) caps.set(project, Math.max(share(project), this.parallel - (claimed - claim(project))));
    return caps;
  }

  private isActive(project: ProjectState, now: number): boolean {
    return project.held > 0 || count(project) > 0 || now - project.lastEnded < this.recentMs;
  }

  private leastVirtualTime(except: ProjectState): number {
    let least = Infinity;
    const now = this.now();
    for (const project of this.projects.values())
      if (project !== except && this.isActive(project, now)) least = Math.min(least, project.virtualTime);
    return least === Infinity ? 0 : least;
  }

  private scheduleLapse(now: number): void {
    let soonest = Infinity;
    for (const project of this.projects.values()) {
      if (project.held === 0 && count(project) === 0 && now - project.lastEnded < this.recentMs)
        soonest = Math.min(soonest, project.lastEnded + this.recentMs);
    }
    if (soonest !== Infinity) this.lapse = setTimeout(() => this.dispatch(), Math.max(1, soonest - now)).unref();
  }

  private grant(waiting: Waiting): void {
    this.busy++;
    const now = this.now();
    waiting.ticket.waitedMs = waiting === this.arriving ? 0 : now - waiting.since;
    if (this.policy === 'fair') {
      const project = this.projects.get(waiting.ticket.project)!;
      project.held++;
      if (waiting.ticket.tier === 'flex') this.flexBusy++;
      // Charged what its calls usually take; set right when it ends.
      project.virtualTime += project.holdMs / project.weight;
    } else if (waiting.ticket.tier === 'flex') this.flexBusy++;
    waiting.grant();
  }

  private releaser(waiting: Waiting): () => void {
    const granted = this.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.busy--;
      const flex = waiting.ticket.tier === 'flex';
      if (flex) this.flexBusy--;
      const project = this.policy === 'fair' ? this.projects.get(waiting.ticket.project) : undefined;
      if (project) {
        const now = this.now();
        const held = now - granted;
        project.held--;
        project.virtualTime += (held - project.holdMs) / project.weight;
        project.holdMs = 0.8 * project.holdMs + 0.2 * held;
        project.lastEnded = now;
      }
      this.dispatch();
    };
  }

  /** Takes a waiting call out (its caller gave up); false if it was no longer waiting. */
  private remove(waiting: Waiting): boolean {
    const queue = this.policy === 'fifo' ? this.fifo : this.projects.get(waiting.ticket.project)?.queues[waiting.ticket.tier];
    const at = queue?.indexOf(waiting) ?? -1;
    if (at < 0) return false;
    queue!.splice(at, 1);
    this.waitingCount--;
    return true;
  }
}

function count(project: ProjectState): number {
  return project.queues.priority.length + project.queues.default.length + project.queues.flex.length;
}

/** When the first call of a project's tier arrived. */
function head(project: ProjectState, tier: ServiceTier): number {
  return project.queues[tier][0]?.since ?? Infinity;
}
