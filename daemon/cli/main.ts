// Entry point of `sovereign`: dispatches to a subcommand, turns known failures into a message and an exit code
// (1: the command failed, 2: it was called wrong), and never prints a stack trace for them.
import { ConfigError } from '../config/index.js';
import { KeysError } from '../keys/index.js';
import { ImportError } from '../models/import.js';
import { ManifestError } from '../models/manifest.js';
import { UsageError } from './args.js';

const HELP = `Usage: sovereign <command> [options]

Commands:
  serve            run the daemon (see 'sovereign serve --help')
  keys             create, list, rotate, revoke API keys and set their limits
  projects         create and list projects, and set the limits their keys share
  admin            create the dashboard's administrator accounts
  config check     validate the configuration and print the effective values
  models           list the manifest's models (present, verified, fits) and import model files
  probe            print the hardware facts the daemon sees
  scrub            replace personal data in text on stdin (IDs, Iqama, IBAN, cards)
  audit            provision the TPM signing key, export and verify the audit log
  usage export     what each key used, per day and endpoint, for billing (CSV or JSON lines)
  db               migrate and check the PostgreSQL schema replicas share (store: postgres)
  firstboot        prepare an appliance to serve: audit key, models from a bundle, TLS certificate

Every command takes --help, and --json for machine-readable output.`;

type Command = (argv: string[]) => Promise<number>;

// Loaded on use: `keys list` should not pay for loading llama.cpp.
const COMMANDS: Record<string, () => Promise<Command>> = {
  serve: async () => (await import('./serve.js')).serveCommand,
  keys: async () => (await import('./admin.js')).keysCommand,
  projects: async () => (await import('./admin.js')).projectsCommand,
  admin: async () => (await import('./accounts.js')).adminCommand,
  config: async () => (await import('./config.js')).configCommand,
  models: async () => (await import('./models.js')).modelsCommand,
  probe: async () => (await import('./models.js')).probeCommand,
  scrub: async () => (await import('./scrub.js')).scrubCommand,
  audit: async () => (await import('./audit.js')).auditCommand,
  usage: async () => (await import('./usage.js')).usageCommand,
  db: async () => (await import('./db.js')).dbCommand,
  firstboot: async () => (await import('./firstboot.js')).firstbootCommand,
};

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(`${HELP}\n`);
    return name ? 0 : 2;
  }
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  const known = command !== undefined;
  const json = rest.includes('--json');
  try {
    if (!command) throw new UsageError(`unknown command '${name}'`);
    return await (
      await command()
    )(rest);
  } catch (err) {
    if (err instanceof UsageError) {
      report(json, 'usage', `${err.message}\nRun 'sovereign ${known ? `${name} ` : ''}--help' for usage.`);
      return 2;
    }
    if (err instanceof ConfigError) {
      report(json, 'config', err.message, err.problems);
      return 1;
    }
    if (err instanceof KeysError) {
      report(json, err.kind, err.message);
      return 1;
    }
    if (err instanceof ImportError || err instanceof ManifestError) {
      report(json, err instanceof ImportError ? 'import' : 'manifest', err.message);
      return 1;
    }
    report(json, 'error', (err as Error).message ?? String(err));
    return 1;
  }
}

function report(json: boolean, kind: string, message: string, problems?: string[]): void {
  if (json) process.stdout.write(`${JSON.stringify({ error: { kind, message, ...(problems ? { problems } : {}) } })}\n`);
  process.stderr.write(`sovereign: ${message}\n`);
}

const code = await main(process.argv.slice(2));
process.exitCode = code;
// The daemon has released everything by now; exit even if a library left a timer behind.
if (['serve', 'models', 'probe', 'firstboot'].includes(process.argv[2] ?? '')) process.exit(code);
