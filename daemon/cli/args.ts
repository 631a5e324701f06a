// Shared flag definitions and parsing for every subcommand.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { ConfigFlags } from '../config/index.js';

/** A mistake in how the command was called: printed with the command's usage, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;

export const CONFIG_OPTIONS = {
  config: { type: 'string' },
  'data-dir': { type: 'string' },
  'models-dir': { type: 'string' },
  manifest: { type: 'string' },
} as const satisfies Options;

export const SERVE_OPTIONS = {
  ...CONFIG_OPTIONS,
  posture: { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  region: { type: 'string' },
} as const satisfies Options;

export const COMMON_HELP = `Configuration (every command):
  --config FILE       config file (JSON; see docs/config.md); also SOVEREIGN_CONFIG
  --data-dir DIR      state directory; also SOVEREIGN_DATA_DIR
  --models-dir DIR    model files; also SOVEREIGN_MODELS_DIR
  --manifest FILE     models-manifest.json; also SOVEREIGN_MANIFEST
  --json              machine-readable output
  -h, --help          this help`;

export interface Parsed {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

export function parse(argv: string[], options: Options): Parsed {
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      options: { ...options, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    });
    return { values: values, positionals };
  } catch (err) {
    throw new UsageError((err as Error).message.replace(/\. To specify a positional.*$/s, '.'));
  }
}

export function configFlags(values: Parsed['values']): ConfigFlags {
  const str = (name: string) => (typeof values[name] === 'string' ? values[name] : undefined);
  const flags: ConfigFlags = {};
  const pairs: Array<[keyof ConfigFlags, string]> = [
    ['config', 'config'],
    ['dataDir', 'data-dir'],
    ['modelsDir', 'models-dir'],
    ['manifest', 'manifest'],
    ['posture', 'posture'],
    ['host', 'host'],
    ['port', 'port'],
    ['region', 'region'],
  ];
  for (const [key, flag] of pairs) {
    const value = str(flag);
    if (value !== undefined) flags[key] = value;
  }
  return flags;
}

/** Parses a positive whole number flag, or 'default' to clear it (null). */
export function limitFlag(name: string, raw: string | boolean | undefined, allowDefault: boolean): number | null | undefined {
  if (raw === undefined) return undefined;
  if (allowDefault && raw === 'default') return null;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw) || Number(raw) < 1) {
    throw new UsageError(`--${name} must be a whole number ≥ 1${allowDefault ? " or 'default'" : ''}, got '${String(raw)}'`);
  }
  return Number(raw);
}
