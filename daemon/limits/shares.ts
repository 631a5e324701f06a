// Each key's and each project's share of the in-flight ceiling: a key (or a project, whatever its number of keys)
// that holds its share of the device's concurrent calls gets no more until one ends, so that the others are still
// admitted. Without it, one key trickling the bodies of 512 calls held every place and everyone else got 503.
// A place is taken for the key and for its project together, or for neither.

/** How many places a key and a project may hold: a fraction of the ceiling, never below a floor nor above it. */
export interface ShareSizes {
  perKey: number;
  perProject: number;
}

export function shareSizes(limits: { maxInFlight: number; keyShare: number; projectShare: number; minShare: number }): ShareSizes {
  const size = (fraction: number) => Math.min(limits.maxInFlight, Math.max(limits.minShare, Math.floor(fraction * limits.maxInFlight)));
  return { perKey: size(limits.keyShare), perProject: size(limits.projectShare) };
}

export class InFlightShares {
  /** Places held, by key id and by project id (their prefixes, key_ and proj_, keep them apart). */
  private readonly held = new Map<string, number>();

  constructor(readonly sizes: ShareSizes) {}

  /** Takes a place for the key and its project; or, when either holds its whole share, none, and says which is full. */
  tryEnter(keyId: string, projectId: string): 'key' | 'project' | null {
    const byKey = this.held.get(keyId) ?? 0;
    if (byKey >= this.sizes.perKey) return 'key';
    const byProject = this.held.get(projectId) ?? 0;
    if (byProject >= this.sizes.perProject) return 'project';
    this.held.set(keyId, byKey + 1);
    this.held.set(projectId, byProject + 1);
    return null;
  }

  leave(keyId: string, projectId: string): void {
    this.release(keyId);
    this.release(projectId);
  }

  /** Places `id` (a key or a project) holds now. */
  holding(id: string): number {
    return this.held.get(id) ?? 0;
  }

  private release(id: string): void {
    const count = this.held.get(id) ?? 0;
    // Forgotten at zero: the map holds only the keys and projects with calls in flight.
    if (count <= 1) this.held.delete(id);
    else this.held.set(id, count - 1);
  }
}
