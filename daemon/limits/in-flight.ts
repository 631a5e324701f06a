// The device's own ceiling: past `max` concurrent calls, new ones are refused with 503 and Retry-After instead of
// queueing without bound. Within it, each key, project and member account may hold only its share (shares.ts).
import { InFlightShares, type FullShare, type ShareSizes } from './shares.js';

export class InFlightGate {
  private count = 0;
  readonly shares: InFlightShares;

  /** Without `sizes`, a key, a project or an account may hold every place. */
  constructor(
    private readonly max: number,
    sizes: ShareSizes = { perKey: max, perProject: max, perAccount: max },
  ) {
    this.shares = new InFlightShares(sizes);
  }

  /** A place under the ceiling, or null when every place is taken. */
  enter(): InFlightPlace | null {
    return this.tryEnter() ? new InFlightPlace(this) : null;
  }

  tryEnter(): boolean {
    if (this.count >= this.max) return false;
    this.count++;
    return true;
  }

  leave(): void {
    if (this.count > 0) this.count--;
  }

  get current(): number {
    return this.count;
  }

  get capacity(): number {
    return this.max;
  }
}

/** One call's place: under the ceiling, then also in its key's, project's and account's shares once the key is known. */
export class InFlightPlace {
  private keyId: string | null = null;
  private projectId: string | null = null;
  private accountId: string | undefined;
  private released = false;

  constructor(private readonly gate: InFlightGate) {}

  /** Counts the place in the key's, the project's and the account's shares; when one is full, says which (and counts nothing). */
  share(keyId: string, projectId: string, accountId?: string): FullShare | null {
    const full = this.gate.shares.tryEnter(keyId, projectId, accountId);
    if (full) return full;
    this.keyId = keyId;
    this.projectId = projectId;
    this.accountId = accountId;
    return null;
  }

  /** Gives the place back; the second and later calls do nothing. */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.gate.leave();
    if (this.keyId !== null) this.gate.shares.leave(this.keyId, this.projectId!, this.accountId);
  }
}
