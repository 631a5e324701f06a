// A cluster's audit (store: "postgres"): each replica keeps its own log, signed by its own key, and publishes every
// checkpoint it signs, with its public key, in the shared space `audit-anchors`, keyed by the log's origin. So every
// replica can list every replica's newest checkpoint (GET /v1/audit/anchors, `logs`), an export carries them beside
// this machine's log, and a verifier holding them all checks each log with its own key and sees a fork (two
// checkpoints of one origin that disagree) or a replica gone silent. Publishing never holds up the log: a failure is
// noted and tried again.
import type { FastifyBaseLogger as Logger } from 'fastify';
import type { Store } from '../store/index.js';
import type { Checkpoint } from './checkpoint.js';
import type { Signer } from './signer.js';

/** The shared space the anchors are published in (one of SHARED_SPACES). */
export const ANCHORS_SPACE = 'audit-anchors';

/** One replica's log as it last published it. */
export interface PublishedLog {
  origin: string;
  /** Hex key ID and PEM of the key that signed `checkpoint`. */
  key_id: string;
  public_key: string;
  attestation_key: string | null;
  /** The newest checkpoint it signed and published, as GET /v1/audit/anchors shows checkpoints. */
  checkpoint: Checkpoint;
  published_at: string;
  /** The publisher's audit.heartbeatMs and audit.checkpointMs: what its silence is measured by. */
  heartbeat_ms: number;
  checkpoint_ms: number;
}

export type ListedLog = PublishedLog & { silent: boolean };

/**
 * How long a log may go without publishing before it is called silent. A replica signs, and so publishes, at least
 * every heartbeat; the timer that notices a heartbeat is due runs every checkpoint interval, so it may be that much
 * late; and one publication may fail (PostgreSQL restarting) and wait for the next. So a log is silent once it has
 * missed two: nothing for 2 × (heartbeat + checkpoint interval), its own settings (10 min 2 s by default).
 */
export function silentAfterMs(log: { heartbeat_ms: number; checkpoint_ms: number }): number {
  return 2 * (log.heartbeat_ms + log.checkpoint_ms);
}

/** Every replica's published log, in origin order, each marked silent or not as of `now`. */
export function publishedLogs(store: Store, now = Date.now()): ListedLog[] {
  const out: ListedLog[] = [];
  for (const { value } of store.db<PublishedLog>(ANCHORS_SPACE).getRange()) {
    out.push({ ...value, silent: now - Date.parse(value.published_at) > silentAfterMs(value) });
  }
  return out;
}

/** The key IDs (hex) that signed this machine's log: every one recorded in `audit-keys`, and the current one. */
function ownKeyIds(store: Store, current: Buffer): Set<string> {
  const ids = new Set([current.toString('hex')]);
  for (const key of store.db<string>('audit-keys').getKeys()) if (!key.includes(':')) ids.add(key);
  return ids;
}

/**
 * Why this log cannot publish under its origin, or null when it can: the origin's published record, if there is one,
 * must be a checkpoint of this very log (the same note at the same seq). A record signed by another key is another
 * replica's log under the same name; one signed by this log's key that this log does not hold comes from a copy of
 * this data directory running elsewhere, or this log was restored from an older backup.
 */
export function originConflict(store: Store, signer: Signer, published: PublishedLog | undefined, ownLogSigned: boolean): string | null {
  if (!published) return null;
  const own = store.db<Checkpoint, number>('audit-checkpoints');
  if (own.get(published.checkpoint.seq)?.note === published.checkpoint.note) return null;
  const { origin, checkpoint } = published;
  const what = `(key ${published.key_id}, checkpoint ${checkpoint.seq} of size ${checkpoint.size}, signed ${checkpoint.time})`;
  if (!ownKeyIds(store, signer.keyId).has(published.key_id)) {
    const fix = ownLogSigned
      ? `; this log's checkpoints are signed under it too, and a log keeps its origin: this replica needs an audit log of its own (a new data directory) with a distinct audit.origin`
      : `: set a distinct audit.origin on this replica (for example '${origin}-2')`;
    return `the audit origin '${origin}' is taken: another replica's log publishes its checkpoints under it ${what}. Two replicas' logs must never share an origin${fix}`;
  }
  return `the audit origin '${origin}' has a published checkpoint that is not one of this log's ${what}: another replica runs with a copy of this data directory and key, or this log was restored from an older backup. Two replicas must never share one log: give each a data directory and key of its own, and a distinct audit.origin`;
}

export interface PublisherOptions {
  origin: string;
  heartbeatMs: number;
  checkpointMs: number;
  log: Logger;
}

/**
 * Publishes this log's checkpoints, newest first: a checkpoint still waiting when a newer one is signed is dropped
 * for it. A failure (PostgreSQL down) is noted for health and tried again every checkpoint interval until a
 * publication succeeds; the log goes on being written and signed meanwhile.
 */
export class AnchorPublisher {
  private waiting: Checkpoint | null = null;
  private running: Promise<void> = Promise.resolve();
  private retry: NodeJS.Timeout | undefined;
  private stopped = false;
  /** When this replica last published (ISO 8601), or null before its first publication since start. */
  publishedAt: string | null = null;
  /** Why the last publication failed; null once one succeeds. */
  problem: string | null = null;
  /** Why this log may not publish under its origin (another log's record is there), for health. */
  conflict: string | null = null;

  constructor(
    private readonly store: Store,
    private readonly signer: Signer,
    private readonly options: PublisherOptions,
  ) {}

  /** Publishes `checkpoint` (after the one publishing now, if any); never rejects. */
  publish(checkpoint: Checkpoint): Promise<void> {
    this.waiting = checkpoint;
    clearTimeout(this.retry);
    this.running = this.running
      .then(() => this.publishWaiting())
      .catch((err: unknown) => {
        // publishWaiting catches what publishing throws; anything else must not stop every later publication.
        this.problem = `audit checkpoints cannot be published: ${(err as Error).message}`;
      });
    return this.running;
  }

  /** Stops retrying, and waits for the publication under way (the last checkpoint's, at shutdown). */
  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    await this.running;
  }

  private async publishWaiting(): Promise<void> {
    const checkpoint = this.waiting;
    if (!checkpoint) return;
    this.waiting = null;
    const record: PublishedLog = {
      origin: this.options.origin,
      key_id: checkpoint.key_id,
      public_key: this.signer.publicKeyPem,
      attestation_key: this.signer.attestationKeyPem ?? null,
      checkpoint,
      published_at: new Date().toISOString(),
      heartbeat_ms: this.options.heartbeatMs,
      checkpoint_ms: this.options.checkpointMs,
    };
    try {
      const conflict = await this.store.update((tx) => {
        const current = tx.get<PublishedLog>(ANCHORS_SPACE, record.origin);
        const problem = originConflict(this.store, this.signer, current, true);
        if (!problem) tx.put(ANCHORS_SPACE, record.origin, record);
        return problem;
      });
      if (conflict && !this.conflict) this.options.log.error({ origin: record.origin }, conflict);
      this.conflict = conflict;
      if (!conflict) this.publishedAt = record.published_at;
      if (this.problem) this.options.log.info({ origin: record.origin }, 'audit checkpoints are published again');
      this.problem = null;
    } catch (err) {
      if (!this.problem) {
        this.options.log.error(
          { err: (err as Error).message },
          'an audit checkpoint could not be published to the shared database; the log goes on, and publishing is tried again',
        );
      }
      this.problem = `audit checkpoints cannot be published to the shared database: ${(err as Error).message}`;
      // Tried again, unless a newer checkpoint is already waiting: it replaces this one.
      if (this.waiting === null && !this.stopped) {
        this.waiting = checkpoint;
        this.retry = setTimeout(
          () => {
            if (this.waiting) void this.publish(this.waiting);
          },
          Math.max(this.options.checkpointMs, 1_000),
        );
        this.retry.unref();
      }
    }
  }
}
