// `sovereign models demo`: writes tiny random-weight models and their manifest (daemon/models/tiny/demo.ts) and says
// exactly how to serve them, so that a newcomer gets from a clone to a first answer on a machine without model files.
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config/index.js';
import { DEMO_LABEL, DEMO_POSTURE } from '../models/demo.js';
import { writeDemoModels, type DemoFile } from '../models/tiny/demo.js';
import { UsageError, type Parsed } from './args.js';
import { printJson } from './output.js';

/** What `models demo` is called with: a positional argument (there must be none) and the flags. */
export interface DemoCall {
  file: string | undefined;
  values: Parsed['values'];
  json: boolean;
}

/** A file's size as people read it: 3 kB, 579 kB, 4.2 MB. */
const humanSize = (bytes: number) => (bytes < 1e6 ? `${Math.round(bytes / 1e3)} kB` : `${(bytes / 1e6).toFixed(1)} MB`);

const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** A word as a POSIX shell reads it back: quoted only when it needs to be. */
const SAFE_WORD = new RegExp('^[\\w@%+=:,./-]+$');
const shellWord = (word: string) => (SAFE_WORD.test(word) ? word : `'${word.split("'").join(`'"'"'`)}'`);

/**
 * `models demo`: writes the demo set and says exactly how to serve it: the same bin/sovereign (./bin/sovereign from the
 * repository's root), the same --config and --data-dir it was given (so the daemon finds the keys made for it), and
 * --posture device when the configuration says another posture, which would list none of them.
 */
export function demoCommand({ file, values, json }: DemoCall, config: Config): number {
  if (file) throw new UsageError(`unexpected argument '${file}'`);
  for (const flag of ['models-dir', 'manifest'] as const) {
    if (values[flag] !== undefined) throw new UsageError(`models demo writes into --dir DIR; --${flag} is for the serve command it prints`);
  }
  const dir = typeof values.dir === 'string' ? values.dir : join(config.dataDir, 'demo-models');
  const row = (f: DemoFile) => `  ${(f.id ?? 'manifest').padEnd(13)} ${f.file.padEnd(21)} ${humanSize(f.size).padStart(7)}  ${f.outcome}\n`;
  if (!json) process.stdout.write(`Demo models (${DEMO_LABEL}) in ${resolve(dir)}:\n`);
  const written = writeDemoModels({
    dir,
    force: values.force === true,
    ...(json ? {} : { onFile: (f: DemoFile) => process.stdout.write(row(f)) }),
  });
  const bin = relative(process.cwd(), PACKAGE_ROOT) === '' ? './bin/sovereign' : join(PACKAGE_ROOT, 'bin', 'sovereign');
  const serve = [
    bin,
    'serve',
    ...(config.posture === DEMO_POSTURE ? [] : ['--posture', DEMO_POSTURE]),
    ...(typeof values.config === 'string' ? ['--config', resolve(values.config)] : []),
    ...(typeof values['data-dir'] === 'string' ? ['--data-dir', resolve(values['data-dir'])] : []),
    '--models-dir',
    written.dir,
    '--manifest',
    written.manifest,
  ];
  const line = serve.map(shellWord).join(' ');
  if (json) {
    printJson({ ...written, label: DEMO_LABEL, serve: { argv: serve, line } });
    return 0;
  }
  // Without a signing key the calls work but get no receipt (docs/audit.md); a TPM-less machine needs the software key.
  const signerNote =
    config.audit.signer === 'software'
      ? ''
      : '(On a machine without a TPM signing key, put SOVEREIGN_AUDIT_SIGNER=software in front: then every call gets a signed receipt.)\n';
  process.stdout.write(
    `\nTheir weights are random: every answer is meaningless text. Only the ${DEMO_POSTURE} posture serves them` +
      `${config.posture === DEMO_POSTURE ? '' : ` (this configuration's is ${config.posture}: hence --posture ${DEMO_POSTURE} below)`}.\n` +
      `Serve them with:\n\n  ${line}\n\n${signerNote}` +
      `Then call demo-chat, demo-embed and demo-whisper with a key (sovereign keys create --project P);\n` +
      `README.md, "Try it without model files", shows each call.\n`,
  );
  return 0;
}
