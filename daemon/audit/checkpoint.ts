// Checkpoints in the C2SP tlog-checkpoint format: a signed note whose text is the origin, the tree size and the
// base64 root hash (plus a time line), and whose signature line is "— <origin> base64(key ID ‖ signature)". The
// signature is ECDSA P-256 over SHA-256 of the note text, DER-encoded (signature type 0x02 here); the key ID is the
// first four bytes of SHA-256 of the public key's DER SubjectPublicKeyInfo.
import { createHash } from 'node:crypto';
import type { Database } from 'lmdb';
import type { FastifyBaseLogger as Logger } from 'fastify';
import type { Store } from '../store/index.js';
import type { AuditLog } from './log.js';
import { parseAttest, type Signer, type SignerKind } from './signer.js';

export interface Checkpoint {
  /** 1, 2, 3, … in the order they were signed. */
  seq: number;
  /** Hex key ID of the key that signed it. */
  key_id: string;
  size: number;
  /** Base64 root hash. */
  root: string;
  /** When it was signed (ISO 8601), also inside the signed text. */
  time: string;
  signer: SignerKind;
  /** The whole signed note. */
  note: string;
  /**
   * A TPM quote by the attestation key with SHA-256 of the note text as qualifying data: it carries the TPM's own
   * clock, which the host cannot set, so a verifier can refuse checkpoints whose clock goes back. Base64.
   */
  quote?: { attest: string; signature: string; clock: string; reset_count: number; restart_count: number };
}

/** The note text a checkpoint signs (every line ends with a newline). */
export function noteText(origin: string, size: number, root: Buffer, time: Date, signer: SignerKind): string {
  // Extension lines after the root are allowed by tlog-checkpoint; these say when, and what held the key.
  return `${origin}\n${size}\n${root.toString('base64')}\ntime ${time.toISOString()}\nsigner ${signer}\n`;
}

export function signedNote(text: string, origin: string, keyId: Buffer, signature: Buffer): string {
  return `${text}\n\u2014 ${origin} ${Buffer.concat([keyId, signature]).toString('base64')}\n`;
}

/** The origin the log's newest checkpoint was signed under (its note's first line), or null before the first. */
export function signedOrigin(store: Store): string | null {
  for (const { value } of store.db<Checkpoint, number>('audit-checkpoints').getRange({ reverse: true, limit: 1 })) {
    return originOfNote(value.note);
  }
  return null;
}

/** A checkpoint note's origin: its first line. */
export function originOfNote(note: string): string {
  return note.slice(0, note.indexOf('\n'));
}

export interface CheckpointerOptions {
  origin: string;
  /** How often to sign while the log grows. */
  intervalMs: number;
  /** Longest time without a checkpoint when the log does not grow. */
  heartbeatMs: number;
  log: Logger;
  /** Told of each checkpoint once it is stored (a cluster's replicas publish it: anchors.ts). */
  onSigned?: (checkpoint: Checkpoint) => void;
}

/** Signs checkpoints off the request path: every interval while the log grows, a heartbeat, and one at shutdown. */
export class Checkpointer {
  private readonly db: Database<Checkpoint, number>;
  private latestCheckpoint: Checkpoint | undefined;
  private timer: NodeJS.Timeout | undefined;
  private signing: Promise<void> = Promise.resolve();
  /** The last signing failure, for health; cleared by the next success. */
  lastError: string | null = null;

  constructor(
    store: Store,
    private readonly auditLog: AuditLog,
    readonly signer: Signer,
    private readonly options: CheckpointerOptions,
  ) {
    this.db = store.db<Checkpoint, number>('audit-checkpoints');
    for (const { value } of this.db.getRange({ reverse: true, limit: 1 })) this.latestCheckpoint = value;
    // Every key that ever signed, by key ID: an export names the key each checkpoint needs.
    const keys = store.db<string>('audit-keys');
    // Written again at every start, so one that failed (a full disk) is written at the next.
    const failed = (err: Error) => options.log.error({ err: err.message }, 'the checkpoint signing key could not be recorded');
    keys.put(signer.keyId.toString('hex'), signer.publicKeyPem).then(undefined, failed);
    if (signer.attestationKeyPem) keys.put(`${signer.keyId.toString('hex')}:attestation`, signer.attestationKeyPem).then(undefined, failed);
  }

  get origin(): string {
    return this.options.origin;
  }

  latest(): Checkpoint | undefined {
    return this.latestCheckpoint;
  }

  /** Newest first, starting below `before` (a seq), at most `limit`. */
  list(limit: number, before?: number): Checkpoint[] {
    const out: Checkpoint[] = [];
    const range = before === undefined ? { reverse: true, limit } : { reverse: true, limit, start: before - 1 };
    for (const { value } of this.db.getRange(range)) out.push(value);
    return out;
  }

  get(seq: number): Checkpoint | undefined {
    return this.db.get(seq);
  }

  /**
   * The first checkpoint whose tree includes leaf `index`, or undefined if none does yet. Read from the store, as list()
   * is: a checkpoint is there as soon as its write commits, before the signer hears that it has.
   */
  covering(index: number): Checkpoint | undefined {
    const latest = this.list(1)[0];
    if (!latest || latest.size <= index) return undefined;
    // Sizes never shrink, so the covering checkpoints are a suffix: binary search on seq.
    let low = 1;
    let high = latest.seq;
    while (low < high) {
      const mid = Math.floor((low + high) / 2);
      if (this.db.get(mid)!.size > index) high = mid;
      else low = mid + 1;
    }
    return this.db.get(low);
  }

  start(): void {
    const tick = () => {
      const latest = this.latestCheckpoint;
      const grew = !latest || this.auditLog.size > latest.size;
      const stale = !latest || Date.now() - Date.parse(latest.time) >= this.options.heartbeatMs;
      if (grew || stale) void this.checkpoint();
      this.timer = setTimeout(tick, this.options.intervalMs);
      this.timer.unref();
    };
    tick();
  }

  /** Stops the timer and signs a last checkpoint. */
  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.checkpoint();
  }

  /** Signs a checkpoint of the log as it is now (one at a time; a call while one is signing waits for it). */
  checkpoint(): Promise<void> {
    // signNow never rejects, so one failure cannot stop every later checkpoint.
    this.signing = this.signing.then(() => this.signNow());
    return this.signing;
  }

  private async signNow(): Promise<void> {
    try {
      const size = this.auditLog.size;
      const root = this.auditLog.root(size);
      const time = new Date();
      const text = noteText(this.options.origin, size, root, time, this.signer.kind);
      const signature = await this.signer.sign(Buffer.from(text));
      const quote = this.signer.quote ? await this.signer.quote(createHash('sha256').update(text).digest()) : undefined;
      const clock = quote ? parseAttest(quote.attest) : undefined;
      const checkpoint: Checkpoint = {
        seq: (this.latestCheckpoint?.seq ?? 0) + 1,
        key_id: this.signer.keyId.toString('hex'),
        size,
        root: root.toString('base64'),
        time: time.toISOString(),
        signer: this.signer.kind,
        note: signedNote(text, this.options.origin, this.signer.keyId, signature),
        ...(quote && clock
          ? {
              quote: {
                attest: quote.attest.toString('base64'),
                signature: quote.signature.toString('base64'),
                clock: clock.clock.toString(),
                reset_count: clock.resetCount,
                restart_count: clock.restartCount,
              },
            }
          : {}),
      };
      await this.db.put(checkpoint.seq, checkpoint);
      this.latestCheckpoint = checkpoint;
      this.lastError = null;
      this.options.onSigned?.(checkpoint);
    } catch (err) {
      this.lastError = (err as Error).message;
      this.options.log.error({ err: this.lastError }, 'signing an audit checkpoint failed; retrying at the next interval');
    }
  }
}
