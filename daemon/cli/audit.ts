// `sovereign audit`: provision the TPM signing key, export the log for offline checking, and verify it here.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { publishedLogs, type ListedLog } from '../audit/anchors.js';
import { exportAudit, type ExportSummary } from '../audit/export.js';
import { provisionTpmKey, spkiFingerprint } from '../audit/provision.js';
import { keyIdOf, originOf, SoftwareSigner, softwareKeyFile, tpmOptions } from '../audit/index.js';
import { cliActor, queueEvent } from '../audit/outbox.js';
import { loadConfig, type Config } from '../config/index.js';
import { openStore, type Store } from '../store/index.js';
import { COMMON_HELP, CONFIG_OPTIONS, configFlags, parse, UsageError, type Parsed } from './args.js';
import { printJson } from './output.js';
import { openConfiguredStore } from './store.js';

export const AUDIT_HELP = `Usage: sovereign audit <command> [options]

Commands:
  init-tpm [--replace]      create the TPM's primary key and a non-exportable P-256 signing key, persistent at
                            audit.primaryHandle and audit.keyHandle (TCTI: audit.tcti), and write the public key to
                            <dataDir>/audit-public-key.pem; --replace evicts keys already at those handles
  export --out DIR          write entries.jsonl, anchors.json and public-key.pem for tools/verify-anchors.mjs;
                            with store postgres also logs.json, every replica's newest published checkpoint
                            (verify-anchors checks a cluster given every replica's export)
  verify [--key FILE ...] [--ak FILE] [--state FILE] [--require-tpm]
                            export to a temporary directory and check it as tools/verify-anchors.mjs does
                            (signatures, consistency proofs, every entry, TPM quotes); the keys trusted are --key
                            files, else <dataDir>/audit-public-key*.pem (init-tpm's, current and replaced), else
                            the software key's public half; --ak defaults to <dataDir>/audit-attestation-key.pem;
                            with --state, also that the log extends the checkpoint trusted last time

${COMMON_HELP}`;

const VERIFIER = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'tools', 'verify-anchors.mjs');

interface VerifierModule {
  verify(
    this: void,
    input: { keyPems: string[]; anchors: unknown; entries: Buffer[]; state?: unknown; requireTpm: boolean; akPem?: string },
  ): Promise<{
    lines: string[];
    latest: unknown;
  }>;
}

/** A public key `audit verify` trusts, and where it came from (for the operator to read). */
interface TrustedKey {
  source: string;
  pem: string;
}

/**
 * The public keys `audit verify` trusts: --key files, else the ones init-tpm wrote to the data directory (the
 * current and any replaced ones), else the public half of the software key when audit.signer is software (derived in
 * memory: nothing is written for it).
 */
function trustedKeys(config: Config, given: string[] | undefined): TrustedKey[] {
  const fromFiles = (files: string[]) =>
    files.map((file) => {
      try {
        return { source: file, pem: readFileSync(file, 'utf8') };
      } catch (err) {
        throw new UsageError(`cannot read the public key ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
      }
    });
  if (given?.length) return fromFiles(given);
  const files = (existsSync(config.dataDir) ? readdirSync(config.dataDir) : [])
    .filter((f) => /^audit-public-key.*\.pem$/.test(f))
    .map((f) => join(config.dataDir, f));
  if (files.length || config.audit.signer !== 'software' || !existsSync(softwareKeyFile(config))) return fromFiles(files);
  const keyFile = softwareKeyFile(config);
  return [{ source: `the public half of ${keyFile}`, pem: new SoftwareSigner(keyFile).publicKeyPem }];
}

/** What every `audit` subcommand is called with: the flags, the config, and where its progress lines go. */
interface AuditCall {
  values: Parsed['values'];
  json: boolean;
  config: Config;
  /** Prints a line of progress or result, unless the output is --json. */
  say: (line: string) => void;
}

async function initTpmCommand({ values, json, config, say }: AuditCall): Promise<number> {
  say(`TPM: ${config.audit.tcti}`);
  const keys = await provisionTpmKey(config, values.replace === true, say);
  await queueEvent(config.dataDir, 'audit.key', {
    by: cliActor(),
    signer: 'tpm',
    key_id: keyIdOf(keys.publicKeyPem).toString('hex'),
    replaced: keys.replaced,
  });
  if (json) printJson({ ...tpmOptions(config), ...keys, fingerprint: spkiFingerprint(keys.publicKeyPem) });
  else
    process.stdout.write(
      `public key written to ${keys.publicKeyFile}, attestation key to ${keys.attestationKeyFile}:\n${keys.publicKeyPem}fingerprint ${spkiFingerprint(keys.publicKeyPem)}\n`,
    );
  return 0;
}

/** Exports the log from `store` into `dir` (with `logs`, a cluster's, into logs.json), telling the progress of a long one. */
function exportWithProgress(store: Store, dir: string, { config, say }: AuditCall, logs?: ListedLog[]): Promise<ExportSummary> {
  return exportAudit(
    store,
    dir,
    originOf(config),
    (done, total) => {
      if (total > 50_000) say(`  ${done}/${total} entries`);
    },
    logs,
  );
}

/**
 * The store an export reads: with `store: "postgres"`, brought up to date from PostgreSQL first, so that logs.json has
 * every replica's newest checkpoint; if PostgreSQL does not answer, this replica's copy as it stands (said on stderr:
 * this machine's own log, which is all in its lmdb, is exported whole either way).
 */
async function exportStore(config: Config): Promise<Store> {
  if (config.store !== 'postgres') return openStore(config.dataDir);
  try {
    return await openConfiguredStore(config);
  } catch (err) {
    process.stderr.write(
      `warning: ${(err as Error).message}; logs.json holds the replicas' checkpoints as this replica's copy last had them\n`,
    );
    return openStore(config.dataDir);
  }
}

async function exportCommand(call: AuditCall): Promise<number> {
  const { values, json, config, say } = call;
  if (typeof values.out !== 'string') throw new UsageError('audit export needs --out DIR');
  const store = await exportStore(config);
  const dir = resolve(values.out);
  try {
    const logs = config.store === 'postgres' ? publishedLogs(store) : undefined;
    const summary = await exportWithProgress(store, dir, call, logs);
    if (json) printJson(summary);
    else {
      const others = summary.logs === null ? '' : `, and the newest checkpoints of ${summary.logs} replicas' logs`;
      say(`exported ${summary.entries} entries and ${summary.checkpoints} checkpoints${others} to ${dir}`);
    }
    return 0;
  } finally {
    await store.close();
  }
}

async function verifyCommand(call: AuditCall): Promise<number> {
  const { values, config } = call;
  // The keys trusted are files the operator chose, never the keys recorded in the data being checked. Read first,
  // so that a key that cannot be read stops the check before a long export.
  const keys = trustedKeys(config, values.key as string[] | undefined);
  if (!keys.length) throw new UsageError('no trusted public key: pass --key FILE (audit-public-key.pem from init-tpm)');
  const store = openStore(config.dataDir);
  const dir = mkdtempSync(join(tmpdir(), 'sov-audit-'));
  try {
    const summary = await exportWithProgress(store, dir, call);
    if (!summary.checkpoints) {
      process.stdout.write('FAILED: no signed checkpoints yet (is the signer working? see GET /v1/health)\n');
      return 1;
    }
    return await verifyExport(dir, keys, call);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The entries of an export's entries.jsonl, one buffer a line. */
function readEntries(dir: string): Buffer[] {
  const entriesText = readFileSync(join(dir, 'entries.jsonl'), 'utf8');
  return entriesText
    ? entriesText
        .replace(/\n$/, '')
        .split('\n')
        .map((l) => Buffer.from(l))
    : [];
}

/** The checkpoint --state trusted last time (undefined when it names no file, or a file not made yet). */
function readState(stateFile: string | undefined): unknown {
  let state: unknown;
  try {
    state = stateFile ? JSON.parse(readFileSync(stateFile, 'utf8')) : undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  return state;
}

/** Checks the export in `dir` as tools/verify-anchors.mjs does: exit code 0 when it verifies, 1 when it does not. */
async function verifyExport(dir: string, keys: TrustedKey[], { values, json, config, say }: AuditCall): Promise<number> {
  const { verify } = (await import(VERIFIER)) as VerifierModule;
  const anchors = JSON.parse(readFileSync(join(dir, 'anchors.json'), 'utf8')) as unknown;
  say(`trusting ${keys.map((k) => k.source).join(', ')}`);
  const akFile = typeof values.ak === 'string' ? values.ak : join(config.dataDir, 'audit-attestation-key.pem');
  const entries = readEntries(dir);
  const stateFile = typeof values.state === 'string' ? values.state : undefined;
  const state = readState(stateFile);
  try {
    const result = await verify({
      keyPems: keys.map((k) => k.pem),
      anchors,
      entries,
      state,
      requireTpm: values['require-tpm'] === true,
      // TPM quotes are checked whenever init-tpm left an attestation key (or --ak names one).
      ...(existsSync(akFile) ? { akPem: readFileSync(akFile, 'utf8') } : {}),
    });
    if (stateFile) writeFileSync(stateFile, `${JSON.stringify(result.latest, null, 2)}\n`);
    if (json) printJson({ verified: true, checks: result.lines });
    else {
      // Reports, not checks: entries no checkpoint covers yet, streams without an end.
      const report = (line: string) => line.startsWith('NOT VERIFIED') || line.startsWith('stream cut off');
      for (const line of result.lines) process.stdout.write(report(line) ? `${line}\n` : `ok: ${line}\n`);
      process.stdout.write('VERIFIED\n');
    }
    return 0;
  } catch (err) {
    if (json) printJson({ verified: false, failure: (err as Error).message });
    else process.stdout.write(`FAILED: ${(err as Error).message}\n`);
    return 1;
  }
}

const AUDIT_COMMANDS: Record<string, (call: AuditCall) => Promise<number>> = {
  'init-tpm': initTpmCommand,
  export: exportCommand,
  verify: verifyCommand,
};

export async function auditCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...CONFIG_OPTIONS,
    out: { type: 'string' },
    replace: { type: 'boolean' },
    state: { type: 'string' },
    'require-tpm': { type: 'boolean' },
    key: { type: 'string', multiple: true },
    ak: { type: 'string' },
  });
  const [command, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${AUDIT_HELP}\n`);
    return values.help ? 0 : 2;
  }
  if (rest.length) throw new UsageError(`unexpected argument '${rest[0]}'`);
  const json = values.json === true;
  const { config } = loadConfig(configFlags(values));
  const say = (line: string) => {
    if (!json) process.stdout.write(`${line}\n`);
  };
  const run = Object.hasOwn(AUDIT_COMMANDS, command) ? AUDIT_COMMANDS[command] : undefined;
  if (!run) throw new UsageError(`unknown audit command '${command}'`);
  return run({ values, json, config, say });
}
