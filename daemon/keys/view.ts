// A project as stored and shown, and what listings show of a key (never a secret or its hash). Plain types that import nothing: the
// dashboard's web code reads them too (daemon/dashboard/wire.ts), and its compiler checks every file it reaches.

export interface ProjectRecord {
  id: string;
  name: string;
  createdAt: string;
  /**
   * Limits all the project's keys share (cloud, frontier), set by the operator (`sovereign projects limits`); absent:
   * limits.defaultProjectRpm and limits.defaultProjectTpm.
   */
  rpm?: number;
  tpm?: number;
  /**
   * The dashboard member account that made the project; its projects together hold at most the account's share of
   * the in-flight places (limits.accountShare). Absent for a project an operator or administrator made.
   */
  owner?: string;
}

/** What listings show of a key: never a hash. */
export interface KeyView {
  id: string;
  project: string;
  projectName: string;
  name: string | null;
  hint: string;
  createdAt: string;
  rotatedAt: string | null;
  revokedAt: string | null;
  graceUntil: string | null;
  rpm: number | null;
  tpm: number | null;
  plan: string | null;
  status: 'active' | 'revoked';
}
