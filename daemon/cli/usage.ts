// `sovereign usage export`: what each key used, per day and endpoint, for billing: calls, errors, rate-limit
// refusals, input and generated tokens, with the key's project and plan. Read from the same lmdb store as the
// daemon (which writes its counts every 5 s), so it runs while the daemon does.
import { createWriteStream } from 'node:fs';
import { finished } from 'node:stream/promises';
import { loadConfig } from '../config/index.js';
import { KeyRegistry, type KeyView } from '../keys/index.js';
import { keyLimits } from '../limits/index.js';
import { openConfiguredStore } from './store.js';
import { UsageMeter } from '../usage/index.js';
import { COMMON_HELP, CONFIG_OPTIONS, configFlags, parse, UsageError } from './args.js';

export const USAGE_HELP = `Usage: sovereign usage export [options]

Writes one row per key, endpoint and day (UTC) for billing: day, project, project_name, key, key_name, plan (the
key's plan now, not on that day), endpoint, requests, errors, rate_limited, prompt_tokens, completion_tokens.
Counts reach the store within 5 s of each call; days are kept for usage.billingDays (default 400). Calls an
upstream never took (it was down, or refused them) count as requests with no tokens.

Options:
  --from YYYY-MM-DD   first day (default: the first day of this month)
  --to YYYY-MM-DD     last day, included (default: today)
  --project NAME      only this project's keys
  --format csv|jsonl  (default csv)
  --out FILE          write to FILE instead of stdout

${COMMON_HELP}`;

const COLUMNS = [
  'day',
  'project',
  'project_name',
  'key',
  'key_name',
  'plan',
  'endpoint',
  'requests',
  'errors',
  'rate_limited',
  'prompt_tokens',
  'completion_tokens',
] as const;

function dayFlag(name: string, value: unknown, fallback: string): string {
  if (value === undefined) return fallback;
  // A day that does not exist (2026-02-31) would be read as another one: refused.
  const parsed = typeof value === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(value) ? new Date(`${value}T00:00:00Z`) : null;
  if (typeof value !== 'string' || !parsed || Number.isNaN(parsed.getTime()) || parsed.toISOString().slice(0, 10) !== value) {
    throw new UsageError(`--${name} must be a day written YYYY-MM-DD`);
  }
  return value;
}

/**
 * RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled. A text that a spreadsheet would
 * run as a formula (key names are chosen by dashboard users) gets a leading apostrophe.
 */
function csvField(value: string | number): string {
  const text = typeof value === 'string' && /^[=+\-@\t\r]/.test(value) ? `'${value}` : String(value);
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export async function usageCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...CONFIG_OPTIONS,
    from: { type: 'string' },
    to: { type: 'string' },
    project: { type: 'string' },
    format: { type: 'string' },
    out: { type: 'string' },
  });
  const [command, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${USAGE_HELP}\n`);
    return values.help ? 0 : 2;
  }
  if (command !== 'export') throw new UsageError(`unknown usage command '${command}'`);
  if (rest.length) throw new UsageError(`unexpected argument '${rest[0]}'`);
  const today = new Date().toISOString().slice(0, 10);
  const from = dayFlag('from', values.from, `${today.slice(0, 8)}01`);
  const to = dayFlag('to', values.to, today);
  if (from > to) throw new UsageError(`--from ${from} is after --to ${to}`);
  const format = values.format ?? 'csv';
  if (format !== 'csv' && format !== 'jsonl') throw new UsageError('--format must be csv or jsonl');

  const { config } = loadConfig(configFlags(values));
  const store = await openConfiguredStore(config);
  try {
    const registry = new KeyRegistry(store);
    const keys = new Map<string, KeyView>(registry.listKeys().map((k) => [k.id, k]));
    // An unknown project is refused (by listKeys) rather than giving an empty export.
    const only = typeof values.project === 'string' ? new Set(registry.listKeys({ project: values.project }).map((k) => k.id)) : null;
    const rows = new UsageMeter(store, undefined, config.usage.billingDays)
      .billing(from, to)
      .filter((row) => !only || only.has(row.key))
      .map((row) => {
        const key = keys.get(row.key);
        return {
          day: row.day,
          project: key?.project ?? '',
          project_name: key?.projectName ?? '',
          key: row.key,
          key_name: key?.name ?? '',
          plan: key ? (keyLimits(config, key).plan ?? 'default') : '',
          endpoint: row.route,
          requests: row.calls,
          errors: row.errors,
          rate_limited: row.limited,
          prompt_tokens: row.promptTokens,
          completion_tokens: row.completionTokens,
        };
      });
    const out = typeof values.out === 'string' ? createWriteStream(values.out, { mode: 0o600 }) : process.stdout;
    if (format === 'csv') out.write(`${COLUMNS.join(',')}\n`);
    for (const row of rows) {
      out.write(format === 'csv' ? `${COLUMNS.map((c) => csvField(row[c])).join(',')}\n` : `${JSON.stringify(row)}\n`);
    }
    if (out !== process.stdout) {
      out.end();
      await finished(out);
      process.stderr.write(`${rows.length} rows (${from} to ${to}) written to ${values.out as string}\n`);
    }
    return 0;
  } finally {
    await store.close();
  }
}
