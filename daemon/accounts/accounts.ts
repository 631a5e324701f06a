// Dashboard accounts and their sessions, in lmdb next to projects and keys. A session is a random token held by the
// browser in an HttpOnly cookie; only its SHA-256 is stored, so a copy of the data directory signs no one in. Each
// session has its own CSRF token, which every change must present in a header.
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Database } from 'lmdb';
import { findFresh, type Store } from '../store/index.js';
import { randomId } from '../keys/secrets.js';
import { hashPassword, passwordProblem, verifyPassword } from './passwords.js';
import type { Role, UserView } from './view.js';

export type { Role, UserView } from './view.js';

export interface UserRecord {
  id: string;
  email: string;
  passwordHash: string;
  role: Role;
  /** Projects this account manages; an admin manages every project. */
  projects: string[];
  createdAt: string;
}

export interface SessionRecord {
  userId: string;
  csrf: string;
  createdAt: number;
  expiresAt: number;
  /** The key the chat app of this session calls /v1 with; revoked when the session ends. */
  chatKeyId?: string;
}

export class AccountsError extends Error {
  constructor(
    readonly kind: 'invalid' | 'conflict' | 'not_found' | 'cap',
    message: string,
  ) {
    super(message);
    this.name = 'AccountsError';
  }
}

export const SESSION_HOURS = 12;
const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,255}$/;

const tokenHash = (token: string) => hash('sha256', token, 'hex');

export function view(user: UserRecord): UserView {
  return { id: user.id, email: user.email, role: user.role, projects: user.projects, createdAt: user.createdAt };
}

export class Accounts {
  private readonly users: Database<UserRecord | string, string>;
  private readonly sessions: Database<SessionRecord, string>;

  constructor(private readonly store: Store) {
    this.users = store.db<UserRecord | string>('users');
    this.sessions = store.db<SessionRecord>('sessions');
  }

  /** Creates an account; the email is its sign-in name (case does not matter). */
  async createUser(
    options: { email: string; password: string; role: Role; projects: string[] },
    /** Writes of this machine that record the account's making (its audit event): see Store.update's `local`. */
    inTransaction?: (user: UserRecord) => void,
  ): Promise<UserRecord> {
    const email = options.email.trim().toLowerCase();
    if (!EMAIL.test(email)) throw new AccountsError('invalid', 'Enter a valid email address, such as name@example.org.');
    const problem = passwordProblem(options.password);
    if (problem) throw new AccountsError('invalid', problem);
    if (this.users.get(`email:${email}`)) throw new AccountsError('conflict', `An account for ${email} already exists. Sign in instead.`);
    const user: UserRecord = {
      id: randomId('usr'),
      email,
      passwordHash: await hashPassword(options.password),
      role: options.role,
      projects: options.projects,
      createdAt: new Date().toISOString(),
    };
    // The email may have been taken while the hash was computed.
    const created = await this.store.update(
      (tx) => {
        if (tx.get('users', `email:${email}`)) return false;
        tx.put('users', `email:${email}`, user.id);
        tx.put('users', user.id, user);
        return true;
      },
      (made) => {
        if (made) inTransaction?.(user);
      },
    );
    if (!created) throw new AccountsError('conflict', `An account for ${email} already exists. Sign in instead.`);
    return user;
  }

  findByEmail(email: string): UserRecord | undefined {
    const id = this.users.get(`email:${email.trim().toLowerCase()}`);
    return typeof id === 'string' ? this.user(id) : undefined;
  }

  user(id: string): UserRecord | undefined {
    const record = this.users.get(id);
    return record && typeof record === 'object' ? record : undefined;
  }

  listUsers(): UserRecord[] {
    const out: UserRecord[] = [];
    for (const { value } of this.users.getRange({ start: 'usr_', end: 'usr`' })) if (typeof value === 'object') out.push(value);
    return out;
  }

  hasAdmin(): boolean {
    return this.listUsers().some((u) => u.role === 'admin');
  }

  /** Replaces the account's password (its hash); sessions it has go on until they end or expire. */
  async setPassword(id: string, password: string, inTransaction?: (user: UserRecord) => void): Promise<UserRecord> {
    const problem = passwordProblem(password);
    if (problem) throw new AccountsError('invalid', problem);
    const passwordHash = await hashPassword(password);
    return this.change(id, { passwordHash }, inTransaction);
  }

  /** Makes the account an administrator (every project) or a member (its own projects). */
  setRole(id: string, role: Role, inTransaction?: (user: UserRecord) => void): Promise<UserRecord> {
    return this.change(id, { role }, inTransaction);
  }

  /** Writes `fields` into the account, and runs `inTransaction` (its audit event) in the same transaction. */
  private change(id: string, fields: Partial<UserRecord>, inTransaction?: (user: UserRecord) => void): Promise<UserRecord> {
    return this.store.update((tx) => {
      const user = tx.get<UserRecord | string>('users', id);
      if (!user || typeof user !== 'object') throw new AccountsError('not_found', 'No such account.');
      const next = { ...user, ...fields };
      tx.put('users', id, next);
      return next;
    }, inTransaction);
  }

  /** Adds a project to the account; with `max`, only while the account has fewer (limits.maxProjectsPerAccount). */
  async addProject(userId: string, projectId: string, max?: number): Promise<void> {
    // Read and write in one change: two projects created at once both stay the account's, and cannot pass the cap
    // together.
    await this.store.update((tx) => {
      const user = tx.get<UserRecord | string>('users', userId);
      if (!user || typeof user !== 'object') throw new AccountsError('not_found', 'No such account.');
      if (user.projects.includes(projectId)) return;
      if (max !== undefined && user.projects.length >= max) throw projectCap(max);
      tx.put('users', userId, { ...user, projects: [...user.projects, projectId] });
    });
  }

  /** The account whose password this is, or null (the same time is spent either way). */
  async checkPassword(email: string, password: string): Promise<UserRecord | null> {
    const user = this.findByEmail(email);
    const ok = await verifyPassword(password, user?.passwordHash);
    return ok && user ? user : null;
  }

  /** A new session: the token goes to the browser's cookie and is never stored. */
  async startSession(userId: string, now = Date.now()): Promise<{ token: string; session: SessionRecord }> {
    const token = randomBytes(32).toString('base64url');
    const session: SessionRecord = {
      userId,
      csrf: randomBytes(32).toString('base64url'),
      createdAt: now,
      expiresAt: now + SESSION_HOURS * 3600_000,
    };
    await this.store.update((tx) => tx.put('sessions', tokenHash(token), session));
    return { token, session };
  }

  /**
   * The live session a cookie's token names, with its account. With PostgreSQL it throws SharedStateUnavailable while
   * this replica's copy is not known to be current (a session ended elsewhere must not go on here), and a token this
   * copy does not know is looked for again after catching up (a sign-in through another replica a moment ago).
   */
  async freshSession(token: string | undefined, now = Date.now()): Promise<{ session: SessionRecord; user: UserRecord } | null> {
    if (!token || token.length > 128) return null;
    this.store.shared?.assertFresh();
    return findFresh(this.store, () => this.session(token, now));
  }

  /** The live session a cookie's token names, with its account, as this replica's copy holds it. */
  session(token: string | undefined, now = Date.now()): { session: SessionRecord; user: UserRecord } | null {
    if (!token || token.length > 128) return null;
    const session = this.sessions.get(tokenHash(token));
    if (!session || session.expiresAt <= now) return null;
    const user = this.user(session.userId);
    return user ? { session, user } : null;
  }

  /** Records the session's chat key; false if the session ended meanwhile (the caller then revokes the key). */
  setChatKey(token: string, keyId: string): Promise<boolean> {
    const key = tokenHash(token);
    return this.store.update((tx) => {
      const session = tx.get<SessionRecord>('sessions', key);
      if (!session) return false;
      tx.put('sessions', key, { ...session, chatKeyId: keyId });
      return true;
    });
  }

  /** Ends a session; returns it so the caller can revoke its chat key. */
  endSession(token: string): Promise<SessionRecord | undefined> {
    const key = tokenHash(token);
    return this.store.update((tx) => {
      const session = tx.get<SessionRecord>('sessions', key);
      if (session) tx.remove('sessions', key);
      return session;
    });
  }

  /** Removes expired sessions; returns them so their chat keys can be revoked. */
  sweepSessions(now = Date.now()): Promise<SessionRecord[]> {
    return this.store.update((tx) => {
      const expired: Array<{ key: string; session: SessionRecord }> = [];
      for (const { key, value } of tx.range<SessionRecord>('sessions'))
        if (value.expiresAt <= now) expired.push({ key: key as string, session: value });
      // Read one by one, so that two replicas sweeping at once do not both revoke a session's chat key.
      for (const { key } of expired) if (tx.get('sessions', key)) tx.remove('sessions', key);
      return expired.map((e) => e.session);
    });
  }
}

export function projectCap(max: number): AccountsError {
  return new AccountsError(
    'cap',
    `This account already has ${max} project${max === 1 ? '' : 's'}, the most an account may create here (limits.maxProjectsPerAccount). Use one of them, or ask the operator.`,
  );
}

/** Constant-time comparison of two tokens. */
export function sameToken(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b) return false;
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
