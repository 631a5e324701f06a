// The audit trail: one entry per authenticated call in an append-only Merkle log (durable before the response
// leaves), checkpoints signed by the TPM (or, when configured, a software key) off the request path, and the proofs
// an operator needs to check both from another machine.
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { FastifyBaseLogger as Logger } from 'fastify';
import type { Config } from '../config/index.js';
import type { RedactionCounts } from '../scrub/index.js';
import type { Store } from '../store/index.js';
import { ANCHORS_SPACE, AnchorPublisher, originConflict, publishedLogs, type ListedLog, type PublishedLog } from './anchors.js';
import { ENTRY_KINDS, entryJson, type EntryFields, type EntryKind } from './entries.js';
import { Checkpointer, signedOrigin, type Checkpoint } from './checkpoint.js';
import { AuditLog } from './log.js';
import { SoftwareSigner, TpmSigner, type Signer, type TpmOptions } from './signer.js';
import { isoTime } from './time.js';

export { ANCHORS_SPACE, silentAfterMs, type ListedLog, type PublishedLog } from './anchors.js';
export { canonicalJson, type Canonical } from './canonical.js';
export { ENTRY_KINDS, entryJson, isEntryKind, type EntryFields, type EntryKind } from './entries.js';
export { noteText, signedNote, type Checkpoint } from './checkpoint.js';
export { AuditLog } from './log.js';
export * as merkle from './merkle.js';
export { isoTime } from './time.js';
export { keyIdOf, parseAttest, SoftwareSigner, TpmSigner, type Signer, type SignerKind, type TpmOptions } from './signer.js';

/** What the HTTP layer knows about a call when it ends. */
export interface CallRecord {
  /** The daemon's own id for the call (`req_` and hex). */
  requestId: string;
  keyId: string;
  projectId: string;
  method: string;
  route: string;
  model: string | null;
  status: number;
  redactions: RedactionCounts | null;
  answerRedactions: RedactionCounts | null;
  /** SHA-256 digests, in lower-case hex. */
  requestSha256: string;
  responseSha256: string;
  /** The frontier provider the call was sent to, if it was: the entry then says the call left the boundary. */
  leftBoundary?: string | null;
  /** A streamed call's `stream.start` entry (its leaf): the end entry names it, so a start without an end stands out. */
  streamStart?: number | null;
}

export interface AuditHealth {
  entries: number;
  signer: 'tpm' | 'software' | null;
  latest_checkpoint: { seq: number; size: number; time: string } | null;
  /** Why checkpoints are not being signed, if they are not (or, in a cluster, why this log may not publish them). */
  problem: string | null;
  /**
   * With `store: "postgres"`: when this replica last published a checkpoint to the shared database (null before its
   * first since start), and why the last try failed, if it did (it is tried again; the log goes on meanwhile).
   */
  anchors?: { published_at: string | null; problem: string | null };
}

/** Redaction counts in canonical JSON: their keys in sorted order (a new type needs its place here). */
function countsJson(counts: RedactionCounts | null): string {
  if (!counts) return 'null';
  return `{"CARD":${counts.CARD},"IBAN":${counts.IBAN},"IQAMA":${counts.IQAMA},"NATIONAL_ID":${counts.NATIONAL_ID}}`;
}

const str = JSON.stringify;
/**
 * A string the daemon made itself in an alphabet JSON never escapes (a hex digest, a request id, an ISO time): quoted
 * as JSON.stringify would, without its cost (JSON.stringify is most of what a small string's quoting costs).
 */
const own = (s: string) => `"${s}"`;

/**
 * A call's entry as canonical JSON (RFC 8785): the same bytes canonicalJson makes of the entry object, written in
 * its keys' sorted order without building the object or sorting, because every call pays for it. Strings go through
 * JSON.stringify as canonicalJson's do, except those the daemon made itself (`own`); the status is an integer.
 * `test/audit-merkle.test.ts` checks the bytes against canonicalJson; a new field must go in its sorted place.
 */
export function callEntryJson(call: CallRecord, time: string, region: string): string {
  return (
    `{"answer_redactions":${countsJson(call.answerRedactions)},"key":${str(call.keyId)},"kind":"call"` +
    // Only on calls that left: every other entry keeps the shape it always had.
    (call.leftBoundary ? `,"left_boundary":${str(call.leftBoundary)}` : '') +
    `,"method":${str(call.method)},"model":${call.model === null ? 'null' : str(call.model)}` +
    `,"project":${str(call.projectId)},"redactions":${countsJson(call.redactions)},"region":${str(region)}` +
    `,"request_id":${own(call.requestId)},"request_sha256":${own(call.requestSha256)}` +
    `,"response_sha256":${own(call.responseSha256)},"route":${str(call.route)},"status":${call.status}` +
    // Only on streamed calls, like left_boundary: a leaf index is an integer.
    (typeof call.streamStart === 'number' ? `,"stream_start":${call.streamStart}` : '') +
    `,"time":${own(time)},"v":${ENTRY_KINDS.call}}`
  );
}

export function softwareKeyFile(config: Config): string {
  return join(config.dataDir, 'audit-signing-key.pem');
}

export function tpmOptions(config: Config): TpmOptions {
  const { tcti, keyHandle, primaryHandle, attestationKeyHandle, endorsementPrimaryHandle } = config.audit;
  return { tcti, keyHandle, primaryHandle, attestationKeyHandle, endorsementPrimaryHandle };
}

/**
 * The origin a new log is given: audit.origin, or one named after the region; with `store: "postgres"` (replicas, each
 * with a log of its own) after the region and this machine's host name, since two logs must never share an origin.
 */
export function originOf(config: Config, host = hostname()): string {
  if (config.audit.origin !== undefined) return config.audit.origin;
  if (config.store !== 'postgres') return `sovereign/${config.region}`;
  // An origin is one line of printable ASCII without spaces (audit.origin's pattern).
  const name = host.replace(/[^\x21-\x7e]/g, '-') || 'replica';
  return `sovereign/${config.region}/${name}`;
}

/**
 * A log keeps the origin its checkpoints were first signed under: a verifier checks every checkpoint against one
 * origin, so a region changed later (which the boot entry records) leaves it as it is. An audit.origin set to
 * another name would start a second log over the first one's entries, and is refused.
 */
export function logOrigin(config: Config, signedUnder: string | null): string {
  if (signedUnder === null) return originOf(config);
  if (config.audit.origin !== undefined && config.audit.origin !== signedUnder) {
    throw new Error(
      `audit.origin is '${config.audit.origin}', but this audit log's checkpoints are signed under '${signedUnder}'; a log's origin cannot change: set audit.origin to '${signedUnder}' or remove it`,
    );
  }
  return signedUnder;
}

/**
 * What to do when the TPM holds no usable signing key: said by health, by a receipt that cannot exist, and by the
 * dashboard. The names are the CLI's command and the configuration's environment variable.
 */
export const SIGNER_NOT_PROVISIONED =
  'The audit signer is not provisioned: run `sovereign audit init-tpm` on the appliance (it makes the signing key in the TPM), or, on a development machine without a TPM, set SOVEREIGN_AUDIT_SIGNER=software (audit.signer "software"); then restart the daemon';

/** How often a log stopped by a failed write tries to start again. */
const RECOVERY_MS = 2_000;

export class AuditService {
  private readonly recovery: NodeJS.Timeout;
  /** Set when this start created the software signing key (the daemon logs it as an `audit.key` entry). */
  createdKey = false;
  /** The key ID (hex) that signed the newest checkpoint before this start, if any. */
  previousKeyId: string | null = null;

  private constructor(
    readonly log: AuditLog,
    readonly checkpoints: Checkpointer | null,
    private readonly region: string,
    private readonly origin: string,
    private readonly signerProblem: string | null,
    logger: Logger,
    /** With `store: "postgres"`: what publishes this log's checkpoints, and the store every replica's are read from. */
    private readonly cluster: { publisher: AnchorPublisher; store: Store } | null,
  ) {
    // A full disk stops the log (every call gets 503); once it takes writes again, so does the log.
    this.recovery = setInterval(() => {
      if (!log.stoppedBy) return;
      log.recover().then(
        (recovered) => {
          if (recovered) logger.warn({ entries: log.size }, 'the audit log takes entries again');
        },
        (err: Error) => logger.error({ err: err.message }, 'the audit log could not start again; retrying'),
      );
    }, RECOVERY_MS);
    this.recovery.unref();
  }

  /**
   * Opens the log and the signer the configuration names. Without a usable TPM key the device posture still serves
   * (entries are logged, checkpoints wait, health says why); every other posture refuses to start.
   */
  static async open(config: Config, store: Store, log: Logger): Promise<AuditService> {
    // Journal files left in the data directory (the default place) are replayed wherever the journal is now.
    const auditLog = AuditLog.open(store, { journalDir: config.audit.journalDir ?? config.dataDir, formerJournalDirs: [config.dataDir] });
    let signer: Signer | null = null;
    let problem: string | null = null;
    const createsKey = config.audit.signer === 'software' && !existsSync(softwareKeyFile(config));
    try {
      signer = config.audit.signer === 'software' ? new SoftwareSigner(softwareKeyFile(config)) : await TpmSigner.open(tpmOptions(config));
    } catch (err) {
      problem = `audit checkpoints cannot be signed: ${(err as Error).message}`;
      if (config.audit.signer === 'tpm') problem += `. ${SIGNER_NOT_PROVISIONED}`;
      if (config.posture !== 'device') throw new Error(problem);
      log.warn(problem);
    }
    const signedUnder = signedOrigin(store);
    const origin = logOrigin(config, signedUnder);
    // A cluster's replicas publish their checkpoints, each under its own origin: one taken by another log is refused.
    let publisher: AnchorPublisher | null = null;
    if (store.shared && signer) {
      const conflict = originConflict(store, signer, store.db<PublishedLog>(ANCHORS_SPACE).get(origin), signedUnder !== null);
      if (conflict) {
        await auditLog.close();
        throw new Error(conflict);
      }
      publisher = new AnchorPublisher(store, signer, {
        origin,
        heartbeatMs: config.audit.heartbeatMs,
        checkpointMs: config.audit.checkpointMs,
        log,
      });
    }
    const checkpoints = signer
      ? new Checkpointer(store, auditLog, signer, {
          origin,
          intervalMs: config.audit.checkpointMs,
          heartbeatMs: config.audit.heartbeatMs,
          log,
          ...(publisher ? { onSigned: (checkpoint: Checkpoint) => void publisher.publish(checkpoint) } : {}),
        })
      : null;
    if (signer?.kind === 'software') log.warn('audit checkpoints are signed by a software key (audit.signer is software), not the TPM');
    const previousKeyId = checkpoints?.latest()?.key_id ?? null;
    checkpoints?.start();
    const cluster = publisher ? { publisher, store } : null;
    const service = new AuditService(auditLog, checkpoints, config.region, origin, problem, log, cluster);
    service.createdKey = createsKey && signer !== null;
    service.previousKeyId = previousKeyId;
    return service;
  }

  /** Appends the call's entry; resolves with its leaf index once it is on disk. */
  record(call: CallRecord): Promise<number> {
    return this.log.appendCanonical(callEntryJson(call, isoTime(), this.region), call.requestId);
  }

  /** Appends an entry of `kind` (not a call's); resolves with its leaf index once it is on disk. */
  append(kind: EntryKind, fields: EntryFields): Promise<number> {
    const requestId = typeof fields.request_id === 'string' ? fields.request_id : null;
    return this.log.appendCanonical(entryJson(kind, fields, isoTime(), this.region), requestId);
  }

  get originName(): string {
    return this.origin;
  }

  /**
   * Every replica's log as it last published it (this one's included), marked silent when it has published nothing
   * for longer than its heartbeat promises (anchors.ts); null without a cluster (`store: "lmdb"`).
   */
  logs(now = Date.now()): ListedLog[] | null {
    return this.cluster ? publishedLogs(this.cluster.store, now) : null;
  }

  health(): AuditHealth {
    const latest = this.checkpoints?.latest();
    const publisher = this.cluster?.publisher;
    return {
      entries: this.log.size,
      signer: this.checkpoints?.signer.kind ?? null,
      latest_checkpoint: latest ? { seq: latest.seq, size: latest.size, time: latest.time } : null,
      problem: this.log.problem ?? this.signerProblem ?? this.checkpoints?.lastError ?? publisher?.conflict ?? null,
      ...(publisher ? { anchors: { published_at: publisher.publishedAt, problem: publisher.problem } } : {}),
    };
  }

  /** Signs a last checkpoint covering every entry. */
  async close(): Promise<void> {
    clearInterval(this.recovery);
    // The last checkpoint covers every acknowledged call: wait until lmdb has them all readable.
    await this.log.settled().catch(() => {});
    await this.checkpoints?.stop();
    // The last checkpoint's publication, before the store closes.
    await this.cluster?.publisher.close();
    await this.log.close();
  }
}

export type { Checkpoint as AuditCheckpoint };
