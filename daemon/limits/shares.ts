// Each key's, each project's and each member account's share of the in-flight ceiling: a key (or a project, whatever
// its number of keys, or an account, whatever its number of projects) that holds its share of the device's concurrent
// calls gets no more until one ends, so that the others are still admitted. Without it, one key trickling the bodies
// of 512 calls held every place and everyone else got 503; without the account's, a member spreading such calls over
// two projects of its own did. A place is taken for the key, its project and its account together, or for none.

/** How many places a key, a project and an account may hold: a fraction of the ceiling, never below a floor nor above it. */
export interface ShareSizes {
  perKey: number;
  perProject: number;
  perAccount: number;
}

export function shareSizes(limits: {
  maxInFlight: number;
  keyShare: number;
  projectShare: number;
  accountShare: number;
  minShare: number;
}): ShareSizes {
  const size = (fraction: number) => Math.min(limits.maxInFlight, Math.max(limits.minShare, Math.floor(fraction * limits.maxInFlight)));
  return { perKey: size(limits.keyShare), perProject: size(limits.projectShare), perAccount: size(limits.accountShare) };
}

export type FullShare = 'key' | 'project' | 'account';

export class InFlightShares {
  /** Places held, by key, project and account id (their prefixes, key_, proj_ and usr_, keep them apart). */
  private readonly held = new Map<string, number>();

  constructor(readonly sizes: ShareSizes) {}

  /**
   * Takes a place for the key, its project and its account (a project an operator made has none); or, when one of
   * them holds its whole share, none, and says which is full.
   */
  tryEnter(keyId: string, projectId: string, accountId?: string): FullShare | null {
    const byKey = this.held.get(keyId) ?? 0;
    if (byKey >= this.sizes.perKey) return 'key';
    const byProject = this.held.get(projectId) ?? 0;
    if (byProject >= this.sizes.perProject) return 'project';
    const byAccount = accountId === undefined ? 0 : (this.held.get(accountId) ?? 0);
    if (byAccount >= this.sizes.perAccount) return 'account';
    this.held.set(keyId, byKey + 1);
    this.held.set(projectId, byProject + 1);
    if (accountId !== undefined) this.held.set(accountId, byAccount + 1);
    return null;
  }

  leave(keyId: string, projectId: string, accountId?: string): void {
    this.release(keyId);
    this.release(projectId);
    if (accountId !== undefined) this.release(accountId);
  }

  /** Places `id` (a key, a project or an account) holds now. */
  holding(id: string): number {
    return this.held.get(id) ?? 0;
  }

  private release(id: string): void {
    const count = this.held.get(id) ?? 0;
    // Forgotten at zero: the map holds only the keys, projects and accounts with calls in flight.
    if (count <= 1) this.held.delete(id);
    else this.held.set(id, count - 1);
  }
}
