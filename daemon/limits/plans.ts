// Plans (config `plans`): the limits a key gets where it has none of its own. A key names its plan; a key without
// one is on limits.defaultPlan; without that (or when a key's plan is no longer in the config) the limits are
// limits.defaultRpm and limits.defaultTpm.
import type { Config } from '../config/index.js';

export interface PlanLimits {
  /** The plan that applies, or null for the configured defaults. */
  plan: string | null;
  rpm: number;
  tpm: number;
}

export function planLimits(config: Config, plan: string | undefined | null): PlanLimits {
  for (const name of [plan, config.limits.defaultPlan]) {
    if (name && Object.hasOwn(config.plans, name)) return { plan: name, ...config.plans[name]! };
  }
  return { plan: null, rpm: config.limits.defaultRpm, tpm: config.limits.defaultTpm };
}

/** The limits that apply to a key: its own, else its plan's. */
export function keyLimits(config: Config, key: { rpm?: number | null; tpm?: number | null; plan?: string | null }): PlanLimits {
  const base = planLimits(config, key.plan);
  return { plan: base.plan, rpm: key.rpm ?? base.rpm, tpm: key.tpm ?? base.tpm };
}
