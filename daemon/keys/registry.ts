// Projects and API keys, persisted in lmdb. Only hashes of secrets are stored; a secret exists in clear only in
// the return value of create() and rotate(), which the caller shows once.
import type { Database } from 'lmdb';
import type { Store, Tx } from '../store/index.js';
import { digestMatches, hashSecret, keyIdOf, newSecret, randomId, redact, secretDigest } from './secrets.js';
import type { KeyView, ProjectRecord } from './view.js';

export type { KeyView, ProjectRecord } from './view.js';

export interface KeyRecord {
  id: string;
  projectId: string;
  name?: string;
  createdAt: string;
  /** SHA-256 of the current secret. */
  hash: Uint8Array;
  /** Recognisable, unusable form of the current secret (prefix and last four characters). */
  hint: string;
  /** The secret replaced by the last rotation, accepted until `until` (ms since the epoch). */
  previous?: { hash: Uint8Array; until: number };
  rotatedAt?: string;
  revokedAt?: string;
  /** Own limits; absent means the plan's, or the configured default. */
  rpm?: number;
  tpm?: number;
  /** The plan (config `plans`) whose limits apply where the key has none of its own; absent: limits.defaultPlan. */
  plan?: string;
}

export class KeysError extends Error {
  constructor(
    readonly kind: 'not_found' | 'conflict' | 'invalid' | 'cap',
    message: string,
  ) {
    super(message);
    this.name = 'KeysError';
  }
}

const PROJECT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const MAX_GRACE_SECONDS = 7 * 24 * 3600;

function checkLimit(name: string, value: number | undefined): void {
  if (value === undefined) return;
  if (!Number.isSafeInteger(value) || value < 1) throw new KeysError('invalid', `${name} must be a whole number ≥ 1`);
}

/** A key record as authentication needs it, with its hashes ready to compare. */
interface CachedKey {
  record: KeyRecord;
  /** The key's project, read with it (its limits apply to the key's calls). */
  project: ProjectRecord | undefined;
  /** The stored hashes as `secretDigest` makes them, for the per-call comparison. */
  digest: string;
  previous?: string;
}

const VERSION = 'keys';

/** Writes of this machine's own that record a change with it (the CLI's audit events): see Store.update. */
type Local<T> = (result: T) => void;

/** A presented secret's key, and whether the secret is the key's current one (else its previous one, in its grace). */
export interface KeyMatch {
  record: KeyRecord;
  /** The key's project, if it still exists. */
  project: ProjectRecord | undefined;
  current: boolean;
}

export class KeyRegistry {
  private readonly projects: Database<ProjectRecord | string, string>;
  private readonly keys: Database<KeyRecord, string>;
  /**
   * A counter every change to a key bumps, in the same transaction, whichever process makes it (the CLI, the
   * dashboard): authentication reads this one number instead of decoding the key's record on every call, and drops
   * its cache when the number moved.
   */
  private readonly versions: Database<number, string>;
  private readonly cache = new Map<string, CachedKey>();
  private cachedVersion: number | undefined;

  constructor(private readonly store: Store) {
    this.projects = store.db<ProjectRecord | string>('projects');
    this.keys = store.db<KeyRecord>('keys');
    this.versions = store.db<number>('versions');
  }

  /**
   * Bumps the version in the change `tx` makes. Every change to a key or a project reads and writes this one record,
   * so two made at once on different replicas conflict, and the second runs again on the first's result.
   */
  private bump(tx: Tx): void {
    tx.put('versions', VERSION, (tx.get<number>('versions', VERSION) ?? 0) + 1);
  }

  /** Writes a key record and bumps the version, in `tx`. */
  private save(tx: Tx, record: KeyRecord): void {
    tx.put('keys', record.id, record);
    this.bump(tx);
  }

  /** A new project; `owner`, the member account making it (see ProjectRecord.owner). */
  async createProject(name: string, owner?: string, local?: Local<ProjectRecord>): Promise<ProjectRecord> {
    if (!PROJECT_NAME.test(name) || name.startsWith('proj_')) {
      throw new KeysError(
        'invalid',
        `project name '${name}' must be 1–64 letters, digits, '.', '_' or '-', starting with a letter or digit`,
      );
    }
    const project: ProjectRecord = { id: randomId('proj'), name, createdAt: new Date().toISOString(), ...(owner ? { owner } : {}) };
    return this.store.update((tx) => {
      if (tx.get('projects', `name:${name}`) !== undefined) throw new KeysError('conflict', `project '${name}' already exists`);
      tx.put('projects', project.id, project);
      tx.put('projects', `name:${name}`, project.id);
      this.bump(tx);
      return project;
    }, local);
  }

  /** Removes a project that has no keys (undoing a sign-up that failed after its project was made). */
  async removeProject(id: string): Promise<void> {
    await this.store.update((tx) => {
      const project = tx.get<ProjectRecord | string>('projects', id);
      if (typeof project !== 'object') return;
      this.bump(tx);
      for (const { value } of tx.range<KeyRecord>('keys')) {
        if (value.projectId === id) throw new KeysError('conflict', `project '${project.name}' still has keys`);
      }
      tx.remove('projects', id);
      tx.remove('projects', `name:${project.name}`);
    });
  }

  listProjects(): ProjectRecord[] {
    const out: ProjectRecord[] = [];
    for (const { value } of this.projects.getRange({ start: 'proj_', end: 'proj`' })) out.push(value as ProjectRecord);
    return out.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /** A project by id or by name (as `tx` reads it, inside a change). */
  findProject(ref: string, tx?: Tx): ProjectRecord | undefined {
    const read = (key: string) => (tx ? tx.get<ProjectRecord | string>('projects', key) : this.projects.get(key));
    const id = ref.startsWith('proj_') ? ref : read(`name:${ref}`);
    if (typeof id !== 'string') return undefined;
    const project = read(id);
    return typeof project === 'object' ? project : undefined;
  }

  private requireProject(ref: string, tx?: Tx): ProjectRecord {
    const project = this.findProject(ref, tx);
    if (!project) throw new KeysError('not_found', `no project '${ref}': create it with 'sovereign projects create ${ref}'`);
    return project;
  }

  private requireKey(id: string, tx?: Tx): KeyRecord {
    const key = tx ? tx.get<KeyRecord>('keys', id) : this.keys.get(id);
    if (!key) throw new KeysError('not_found', `no key '${id}': 'sovereign keys list' shows the keys`);
    return key;
  }

  /**
   * A new key in a project. `maxActive` caps the project's active keys (a dashboard member's, limits.maxKeysPerProject):
   * counted and written in one transaction, so keys created at once cannot pass it together.
   */
  async createKey(
    options: { project: string; name?: string; rpm?: number; tpm?: number; plan?: string; maxActive?: number },
    local?: Local<{ key: KeyView; secret: string }>,
  ): Promise<{ key: KeyView; secret: string }> {
    checkLimit('rpm', options.rpm);
    checkLimit('tpm', options.tpm);
    const project = this.requireProject(options.project);
    const id = randomId('key');
    const secret = newSecret(id);
    const record: KeyRecord = {
      id,
      projectId: project.id,
      createdAt: new Date().toISOString(),
      hash: hashSecret(secret),
      hint: redact(secret),
      ...(options.name ? { name: options.name } : {}),
      ...(options.rpm !== undefined ? { rpm: options.rpm } : {}),
      ...(options.tpm !== undefined ? { tpm: options.tpm } : {}),
      ...(options.plan !== undefined ? { plan: options.plan } : {}),
    };
    const max = options.maxActive;
    return this.store.update((tx) => {
      // Bumped before the keys are counted: a key made at once on another replica makes this change run again.
      this.bump(tx);
      if (max !== undefined && this.activeKeys(project.id, tx) >= max) {
        throw new KeysError(
          'cap',
          `project '${project.name}' already has ${max} active key${max === 1 ? '' : 's'}, the most a project may have here (limits.maxKeysPerProject). Revoke a key you no longer use, or ask the operator.`,
        );
      }
      tx.put('keys', record.id, record);
      return { key: this.view(record, tx), secret };
    }, local);
  }

  /** Keys of the project that still authenticate (not revoked). */
  activeKeys(projectId: string, tx?: Tx): number {
    let count = 0;
    const keys = tx ? tx.range<KeyRecord>('keys') : this.keys.getRange();
    for (const { value } of keys) if (value.projectId === projectId && !value.revokedAt) count++;
    return count;
  }

  /**
   * Sets or clears (null) the limits all a project's keys share; the operator's alone (`sovereign projects limits`).
   * Bumps the keys' version, so the running daemon applies them on the next call.
   */
  async setProjectLimits(
    ref: string,
    limits: { rpm?: number | null; tpm?: number | null },
    local?: Local<ProjectRecord>,
  ): Promise<ProjectRecord> {
    checkLimit('rpm', limits.rpm ?? undefined);
    checkLimit('tpm', limits.tpm ?? undefined);
    return this.store.update((tx) => {
      const next: ProjectRecord = { ...this.requireProject(ref, tx) };
      for (const field of ['rpm', 'tpm'] as const) {
        const value = limits[field];
        if (value === null) delete next[field];
        else if (value !== undefined) next[field] = value;
      }
      tx.put('projects', next.id, next);
      this.bump(tx);
      return next;
    }, local);
  }

  /** Records the member account that made a project (a sign-up makes the project before the account). */
  async setProjectOwner(ref: string, owner: string): Promise<ProjectRecord> {
    return this.store.update((tx) => {
      const next: ProjectRecord = { ...this.requireProject(ref, tx), owner };
      tx.put('projects', next.id, next);
      // Keys cache their project: the next call of any key sees its owner.
      this.bump(tx);
      return next;
    });
  }

  listKeys(options: { project?: string } = {}): KeyView[] {
    const projectId = options.project ? this.requireProject(options.project).id : undefined;
    const out: KeyView[] = [];
    for (const { value } of this.keys.getRange()) if (!projectId || value.projectId === projectId) out.push(this.view(value));
    return out.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  getKey(id: string): KeyView {
    return this.view(this.requireKey(id));
  }

  /**
   * New secret, same public id. The old secret stops working now, or after `graceSeconds`. A second rotation
   * within a grace period ends the first one's grace: at most one old secret is ever accepted.
   */
  async rotateKey(
    id: string,
    graceSeconds = 0,
    local?: Local<{ key: KeyView; secret: string }>,
  ): Promise<{ key: KeyView; secret: string }> {
    if (!Number.isSafeInteger(graceSeconds) || graceSeconds < 0 || graceSeconds > MAX_GRACE_SECONDS) {
      throw new KeysError('invalid', `grace must be a whole number of seconds from 0 to ${MAX_GRACE_SECONDS}`);
    }
    return this.store.update((tx) => {
      const record = this.requireKey(id, tx);
      if (record.revokedAt) throw new KeysError('conflict', `key '${id}' is revoked; create a new key instead`);
      const secret = newSecret(id);
      const next: KeyRecord = { ...record, hash: hashSecret(secret), hint: redact(secret), rotatedAt: new Date().toISOString() };
      if (graceSeconds > 0) next.previous = { hash: record.hash, until: Date.now() + graceSeconds * 1000 };
      else delete next.previous;
      this.save(tx, next);
      return { key: this.view(next, tx), secret };
    }, local);
  }

  async revokeKey(id: string, local?: Local<KeyView>): Promise<KeyView> {
    return this.store.update((tx) => {
      const record = this.requireKey(id, tx);
      if (record.revokedAt) return this.view(record, tx);
      const next: KeyRecord = { ...record, revokedAt: new Date().toISOString() };
      delete next.previous;
      this.save(tx, next);
      return this.view(next, tx);
    }, local);
  }

  async setLimits(id: string, limits: { rpm?: number | null; tpm?: number | null }, local?: Local<KeyView>): Promise<KeyView> {
    checkLimit('rpm', limits.rpm ?? undefined);
    checkLimit('tpm', limits.tpm ?? undefined);
    return this.store.update((tx) => {
      const next: KeyRecord = { ...this.requireKey(id, tx) };
      for (const field of ['rpm', 'tpm'] as const) {
        const value = limits[field];
        if (value === null) delete next[field];
        else if (value !== undefined) next[field] = value;
      }
      this.save(tx, next);
      return this.view(next, tx);
    }, local);
  }

  /** Puts the key on a plan, or (null) back on the default plan. The caller checks the plan exists in the config. */
  async setPlan(id: string, plan: string | null, local?: Local<KeyView>): Promise<KeyView> {
    return this.store.update((tx) => {
      const next: KeyRecord = { ...this.requireKey(id, tx) };
      if (plan === null) delete next.plan;
      else next.plan = plan;
      this.save(tx, next);
      return this.view(next, tx);
    }, local);
  }

  /**
   * The active key a presented secret belongs to, and whether it is the key's current secret (not its previous one,
   * still accepted during a rotation's grace period); null if none. A change made by any process applies to the next
   * call: the version counter is read each time, and a moved counter drops every cached record.
   */
  authenticate(secret: string, now = Date.now()): KeyMatch | null {
    const id = keyIdOf(secret);
    const presented = secretDigest(secret);
    const key = id ? this.cached(id, this.version()) : undefined;
    // Both comparisons run whatever the outcome, so timing does not tell which hash matched.
    const current = digestMatches(presented, key?.digest);
    const previous = digestMatches(presented, key?.previous);
    const record = key?.record;
    if (!record || record.revokedAt) return null;
    if (current) return { record, project: key.project, current: true };
    if (previous && record.previous && record.previous.until > now) return { record, project: key.project, current: false };
    return null;
  }

  /**
   * The active key with this id, without its secret: for calls the daemon makes itself on a key's behalf (a batch's
   * lines, auth/internal.ts), which hold no secret. Read as authentication reads it, so a revocation or new limits
   * apply to the next such call too.
   */
  active(id: string): KeyMatch | null {
    const key = this.cached(id, this.version());
    if (!key || key.record.revokedAt) return null;
    return { record: key.record, project: key.project, current: true };
  }

  /**
   * Whether an Authorization header that failed may name a key made on another replica since this one's copy was
   * last brought up to date: its id is well formed and unknown here (store: postgres only). `refresh` then catches up.
   */
  mayBeNew(header: string | undefined): boolean {
    if (!this.store.shared || !header) return false;
    const secret = /^Bearer +(\S+) *$/i.exec(header)?.[1];
    const id = secret ? keyIdOf(secret) : null;
    return id !== null && this.keys.get(id) === undefined;
  }

  /** Brings this replica's copy of the keys up to date with PostgreSQL (nothing to do on lmdb). */
  refresh(): Promise<void> {
    return this.store.refresh();
  }

  /**
   * A number that moves with every change to any key, by any process (a revocation, a rotation, new limits). With
   * PostgreSQL it throws SharedStateUnavailable while this replica's copy is not known to be current: every
   * authentication reads it first, so none runs on a copy that may miss a revocation.
   */
  version(): number | undefined {
    this.store.shared?.assertFresh();
    return this.versions.get(VERSION);
  }

  private cached(id: string, version: number | undefined): CachedKey | undefined {
    if (version !== this.cachedVersion) {
      this.cache.clear();
      this.cachedVersion = version;
    }
    let key = this.cache.get(id);
    if (key) return key;
    const record = this.keys.get(id);
    // Unknown ids are not cached: anyone can present them, and a miss costs one read.
    if (!record) return undefined;
    const project = this.projects.get(record.projectId);
    key = {
      record,
      project: typeof project === 'object' ? project : undefined,
      digest: Buffer.from(record.hash).toString('base64'),
      ...(record.previous ? { previous: Buffer.from(record.previous.hash).toString('base64') } : {}),
    };
    this.cache.set(id, key);
    return key;
  }

  private view(record: KeyRecord, tx?: Tx): KeyView {
    const project = tx ? tx.get<ProjectRecord | string>('projects', record.projectId) : this.projects.get(record.projectId);
    return {
      id: record.id,
      project: record.projectId,
      projectName: typeof project === 'object' ? project.name : record.projectId,
      name: record.name ?? null,
      hint: record.hint,
      createdAt: record.createdAt,
      rotatedAt: record.rotatedAt ?? null,
      revokedAt: record.revokedAt ?? null,
      graceUntil: record.previous && record.previous.until > Date.now() ? new Date(record.previous.until).toISOString() : null,
      rpm: record.rpm ?? null,
      tpm: record.tpm ?? null,
      plan: record.plan ?? null,
      status: record.revokedAt ? 'revoked' : 'active',
    };
  }
}
