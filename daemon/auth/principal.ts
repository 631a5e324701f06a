// Who a /v1 call acts as: its key, the key's project, and the limits that apply to them.
import type { KeyMatch } from '../keys/index.js';

export interface Principal {
  keyId: string;
  projectId: string;
  /** The key's own limits, or undefined to use the configured defaults. */
  rpm: number | undefined;
  tpm: number | undefined;
  /** The key's plan, or undefined for limits.defaultPlan. */
  plan: string | undefined;
  /** The limits all the project's keys share, or undefined for limits.defaultProjectRpm and defaultProjectTpm. */
  projectRpm: number | undefined;
  projectTpm: number | undefined;
  /** The member account that made the key's project, whose projects share the account's in-flight places. */
  accountId: string | undefined;
}

export function principalOf({ record, project }: KeyMatch): Principal {
  return {
    keyId: record.id,
    projectId: record.projectId,
    rpm: record.rpm,
    tpm: record.tpm,
    plan: record.plan,
    projectRpm: project?.rpm,
    projectTpm: project?.tpm,
    accountId: project?.owner,
  };
}
