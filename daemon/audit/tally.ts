// Events anyone outside can cause as often as they like (a refused sign-in, a refused egress attempt) are counted,
// not logged one by one, so that a flood cannot grow the log without bound: the first event of a subject gets an
// entry at once (count 1), the ones after it are counted, and each window that counted any ends with one entry
// holding the count; close() writes what is counted. Entries per subject: at most one per window, plus the first.
import type { EntryFields } from './index.js';

interface Counting {
  fields: EntryFields;
  count: number;
  since: string;
  until: string;
}

export interface TallyOptions {
  /** Writes one entry; failures are the caller's to report (a stopped log refuses every entry anyway). */
  append: (fields: EntryFields) => Promise<unknown>;
  windowMs: number;
  /**
   * Whether a subject with nothing counted in a window is forgotten, so its next event is logged at once again (a
   * sign-in refused tomorrow); if not, only its first event in this process's life is (an egress kind per boot).
   */
  forgetIdle: boolean;
}

export class Tally {
  private readonly subjects = new Map<string, Counting>();
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly options: TallyOptions) {
    this.timer = setInterval(() => void this.flush(), options.windowMs);
    this.timer.unref();
  }

  /** One event of `subject`; `fields` say what it is (the same for every event of the subject). */
  note(subject: string, fields: EntryFields): void {
    const now = new Date().toISOString();
    const counting = this.subjects.get(subject);
    if (!counting) {
      this.subjects.set(subject, { fields, count: 0, since: now, until: now });
      void this.options.append({ ...fields, count: 1, since: now, until: now });
      return;
    }
    if (counting.count === 0) counting.since = now;
    counting.count++;
    counting.until = now;
  }

  /** Writes one entry per subject that counted events since the last; resolves once they are written. */
  flush(): Promise<unknown> {
    const writes: Array<Promise<unknown>> = [];
    for (const [subject, c] of this.subjects) {
      if (c.count === 0) {
        if (this.options.forgetIdle) this.subjects.delete(subject);
        continue;
      }
      writes.push(this.options.append({ ...c.fields, count: c.count, since: c.since, until: c.until }));
      c.count = 0;
    }
    return Promise.all(writes);
  }

  /** Stops the windows and writes what is counted. */
  close(): Promise<unknown> {
    clearInterval(this.timer);
    return this.flush();
  }
}
