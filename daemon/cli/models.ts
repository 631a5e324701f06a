// `sovereign models list|import|bundle-key|bundle|import-bundle|demo` and `sovereign probe`: what the device has, what
// it can serve and why not, signed bundles to carry models onto sealed devices, and random-weight models to try the
// API with where there are none.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { chatSequences, loadConfig, manifestPath, modelsDir, type Config } from '../config/index.js';
import { inferenceThreads, probeHardware } from '../hardware/index.js';
import {
  assessModels,
  createBundleKey,
  importBundle,
  importModel,
  ImportError,
  loadManifest,
  ModelVerifier,
  writeBundle,
  type Manifest,
} from '../models/index.js';
import { AuditOutbox, cliActor } from '../audit/outbox.js';
import { bundleImportedFields, modelImportedFields } from '../models/audit.js';
import { DEMO_LABEL } from '../models/demo.js';
import { BUILT_IN_ENGINES } from '../service/models.js';
import { openStore, type Store } from '../store/index.js';
import { COMMON_HELP, CONFIG_OPTIONS, configFlags, parse, UsageError, type Parsed } from './args.js';
import { demoCommand } from './models-demo.js';
import { printJson, printTable } from './output.js';

export const MODELS_HELP = `Usage: sovereign models <command> [options]

Commands:
  list                 every manifest model: present, verified, fits, listed, and why not
  import FILE [--id ID]
                       verify FILE's header (architecture, parameters, vocabulary…), size and SHA-256 against the
                       manifest and copy it into the models dir atomically; for an entry without a checksum, record
                       the file's as the trusted one. A running daemon lists it within seconds
  bundle-key --out PREFIX
                       create an Ed25519 key for signing bundles: PREFIX.key (private, 0600) and PREFIX.pub (give
                       the .pub to the devices, which list it in models.bundleKeys)
  bundle --out DIR --key FILE [--id ID ...]
                       write the models (every present one, or those named) and bundle.json, signed with FILE, into
                       the empty directory DIR, for carrying onto a sealed device
  import-bundle DIR [--trust FILE ...]
                       check DIR's signature against models.bundleKeys (or the --trust files), then import each
                       model whose size and SHA-256 match the signed bundle and this device's manifest
  demo [--dir DIR] [--force]
                       write tiny models with random weights (chat, embeddings, speech to text) and their manifest
                       into DIR (default: demo-models in the data directory), for trying the API on a machine
                       without model files; prints how to serve them. Only the device posture serves them. Files
                       already written are kept; --force writes them again (and replaces other files in the way)

${COMMON_HELP}`;

export const PROBE_HELP = `Usage: sovereign probe [options]

Prints the hardware facts the daemon sees: RAM (total, available, cgroup limit), CPU model, cores and
features, GPUs and their memory (node-llama-cpp's detection, and nvidia-smi when present).

${COMMON_HELP}`;

const GiB = 1024 ** 3;
const gib = (b: number | null) => (b === null ? null : `${(b / GiB).toFixed(2)} GiB`);

function progress(json: boolean, what: string) {
  return (done: number, total: number) => {
    if (!json && total >= 256 * 1024 * 1024)
      process.stderr.write(
        `${what}: ${Math.round((done / total) * 100)}% (${(done / GiB).toFixed(2)} of ${(total / GiB).toFixed(2)} GiB)\n`,
      );
  };
}

async function runtimeFor(config: Config) {
  // Loaded here, not with this file: import, bundle and demo never start llama.cpp, and need not load it.
  const { llamaRuntime } = await import('../engines/llama/runtime.js');
  return llamaRuntime({ gpu: config.models.gpu, threads: inferenceThreads(config.models.threads) });
}

/** What every `models` subcommand is called with: its one positional argument (a FILE or DIR) and the flags. */
interface ModelsCall {
  file: string | undefined;
  values: Parsed['values'] & { id?: string[]; trust?: string[] };
  json: boolean;
}

/** A subcommand that works on this device's config, manifest and store (opened, and closed after, by the caller). */
interface DeviceCall extends ModelsCall {
  config: Config;
  manifest: Manifest;
  store: Store;
  verifier: ModelVerifier;
}

/** `models bundle-key`: needs nothing of this device, so it runs before the config is loaded. */
function bundleKeyCommand({ file, values, json }: ModelsCall): number {
  if (file) throw new UsageError(`unexpected argument '${file}'`);
  if (typeof values.out !== 'string') throw new UsageError('models bundle-key needs --out PREFIX');
  const key = createBundleKey(values.out);
  if (json) printJson(key);
  else
    process.stdout.write(
      `Private key ${key.privateKeyFile} (keep it off the devices), public key ${key.publicKeyFile}\n  fingerprint ${key.fingerprint}\n`,
    );
  return 0;
}

async function bundleCommand({ file, values, json, config, manifest, verifier }: DeviceCall): Promise<number> {
  if (file) throw new UsageError(`unexpected argument '${file}'`);
  if (typeof values.out !== 'string') throw new UsageError('models bundle needs --out DIR');
  if (typeof values.key !== 'string') throw new UsageError('models bundle needs --key FILE (made by sovereign models bundle-key)');
  const written = await writeBundle({
    outDir: values.out,
    ids: values.id ?? [],
    manifest,
    modelsDir: modelsDir(config),
    verifier,
    signingKeyFile: values.key,
    onProgress: (id) => progress(json, `bundling ${id}`),
  });
  if (json) printJson(written);
  else
    process.stdout.write(
      `Bundle written to ${written.dir}, signed by ${written.fingerprint}:\n${written.models.map((m) => `  ${m.id}  ${m.file}  SHA-256 ${m.sha256}\n`).join('')}`,
    );
  return 0;
}

async function importBundleCommand({ file, values, json, config, manifest, store, verifier }: DeviceCall): Promise<number> {
  if (!file) throw new UsageError('models import-bundle needs the bundle DIR');
  const trustFiles = values.trust?.length ? values.trust : config.models.bundleKeys;
  const result = await importBundle({
    dir: file,
    trustedPems: trustFiles.map((f) => {
      try {
        return readFileSync(f, 'utf8');
      } catch (err) {
        throw new ImportError(`cannot read the trusted bundle key ${f}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
      }
    }),
    manifest,
    modelsDir: modelsDir(config),
    verifier,
    onProgress: (id) => progress(json, `importing ${id}`),
  });
  new AuditOutbox(store).put('bundle.imported', { by: cliActor(), ...bundleImportedFields(result, resolve(file)) });
  if (json) printJson(result);
  else
    process.stdout.write(
      `Bundle of ${result.created}, signed by ${result.fingerprint}:\n${result.models.map((m) => `  ${m.id}  ${m.outcome === 'present' ? 'already present' : 'imported'}  SHA-256 ${m.sha256}\n`).join('')}`,
    );
  return 0;
}

async function importCommand({ file, values, json, config, manifest, store, verifier }: DeviceCall): Promise<number> {
  if (!file) throw new UsageError('models import needs a FILE');
  if ((values.id?.length ?? 0) > 1) throw new UsageError('models import takes one --id');
  const id = values.id?.[0];
  const result = await importModel({
    source: file,
    ...(id ? { id } : {}),
    manifest,
    modelsDir: modelsDir(config),
    verifier,
    onProgress: progress(json, `importing ${file}`),
  });
  new AuditOutbox(store).put('model.imported', { by: cliActor(), ...modelImportedFields(result) });
  if (json) printJson(result);
  else
    process.stdout.write(
      `Imported ${result.id} → ${result.path}\n  SHA-256 ${result.sha256}${result.pinned ? ' (recorded: the manifest had no checksum for it)' : ' (matches the manifest)'}\n` +
        (result.replacedPin ? `  replaces the checksum ${result.replacedPin} recorded for a file that was not this model\n` : ''),
    );
  return 0;
}

async function listCommand({ file, json, config, manifest, verifier }: DeviceCall): Promise<number> {
  if (file) throw new UsageError(`unexpected argument '${file}'`);
  const llama = await runtimeFor(config);
  const hardware = await probeHardware(llama);
  const statuses = await assessModels({
    manifest,
    modelsDir: modelsDir(config),
    verifier,
    llama: () => Promise.resolve(llama),
    hardware,
    headroomBytes: config.models.headroomBytes,
    parallel: chatSequences(config),
    embeddingContexts: config.models.embeddingContexts,
    engines: BUILT_IN_ENGINES,
    posture: config.posture,
    onHashProgress: (id) => progress(json, `verifying ${id}`),
  });
  if (json) printJson(statuses.map((s) => ({ ...s, listed: s.state === 'available' })));
  else
    printTable(
      statuses.map((s) => ({
        id: s.id,
        capability: s.capability,
        present: s.present ? 'yes' : 'no',
        verified: s.verified ? 'yes' : 'no',
        fits: s.fits === null ? null : s.fits ? 'yes' : 'no',
        ram: gib(s.requiredRamBytes),
        listed: s.state === 'available' ? 'yes' : 'no',
        // A listed demo model says what it is where a model not listed says why.
        why: s.state !== 'available' ? `${s.state}: ${s.reason}` : s.demo ? DEMO_LABEL : '',
      })),
      ['id', 'capability', 'present', 'verified', 'fits', 'ram', 'listed', 'why'],
    );
  return 0;
}

/** The subcommands that work on this device. An unknown name is reported only after the config, manifest and store opened. */
const DEVICE_COMMANDS: Record<string, (call: DeviceCall) => Promise<number>> = {
  bundle: bundleCommand,
  'import-bundle': importBundleCommand,
  import: importCommand,
  list: listCommand,
};

export async function modelsCommand(argv: string[]): Promise<number> {
  const { values: parsed, positionals } = parse(argv, {
    ...CONFIG_OPTIONS,
    id: { type: 'string', multiple: true },
    out: { type: 'string' },
    key: { type: 'string' },
    trust: { type: 'string', multiple: true },
    dir: { type: 'string' },
    force: { type: 'boolean' },
  });
  const values = parsed as ModelsCall['values'];
  const [command, file, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${MODELS_HELP}\n`);
    return values.help ? 0 : 2;
  }
  if (rest.length) throw new UsageError(`unexpected argument '${rest[0]}'`);
  const call: ModelsCall = { file, values, json: values.json === true };
  if (command !== 'demo' && (values.dir !== undefined || values.force !== undefined))
    throw new UsageError(`--dir and --force are options of 'models demo', not of 'models ${command}'`);
  if (command === 'bundle-key') return bundleKeyCommand(call);
  const { config } = loadConfig(configFlags(values));
  // Before the manifest is loaded: the demo writes one, and needs none.
  if (command === 'demo') return demoCommand(call, config);
  const manifest = loadManifest(manifestPath(config));
  const store = openStore(config.dataDir);
  try {
    const verifier = new ModelVerifier(store);
    const run = Object.hasOwn(DEVICE_COMMANDS, command) ? DEVICE_COMMANDS[command] : undefined;
    if (!run) throw new UsageError(`unknown models command '${command}'`);
    return await run({ ...call, config, manifest, store, verifier });
  } finally {
    await store.close();
  }
}

export async function probeCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, CONFIG_OPTIONS);
  if (values.help) {
    process.stdout.write(`${PROBE_HELP}\n`);
    return 0;
  }
  if (positionals.length) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  const { config } = loadConfig(configFlags(values));
  const facts = await probeHardware(await runtimeFor(config));
  const threads = inferenceThreads(config.models.threads);
  if (values.json) {
    printJson({ ...facts, inferenceThreads: threads });
    return 0;
  }
  const lines = [
    `RAM        ${gib(facts.ram.totalBytes)} total, ${gib(facts.ram.availableBytes)} available${facts.ram.cgroupLimitBytes !== null ? ` (cgroup limit leaves ${gib(facts.ram.cgroupLimitBytes)})` : ''}`,
    `CPU        ${facts.cpu.model}, ${facts.cpu.cores} cores; features: ${facts.cpu.features.join(' ') || 'none detected'}`,
    `threads    ${threads} for inference`,
    `GPU        ${facts.gpus.length ? facts.gpus.map((g) => `${g.name}: ${gib(g.vramFreeBytes)} free of ${gib(g.vramTotalBytes)} (${g.source})`).join('; ') : 'none found'}`,
    `llama.cpp  ${facts.accelerator === false ? 'CPU only' : `${facts.accelerator} backend`}`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
  return 0;
}
