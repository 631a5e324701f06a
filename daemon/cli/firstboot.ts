// `sovereign firstboot`: the appliance's first-boot steps (daemon/firstboot), run by sovereign-firstboot.service at
// every boot before the daemon; each step finds its work done after the first. Prints what the installer records.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig, manifestPath } from '../config/index.js';
import { firstBoot, reportFile } from '../firstboot/index.js';
import { loadManifest } from '../models/index.js';
import { COMMON_HELP, CONFIG_OPTIONS, configFlags, parse, UsageError } from './args.js';
import { printJson } from './output.js';

/** Where the image's mount-media script mounts a models partition and USB disks, one directory each. */
export const MEDIA_DIR = '/run/sovereign/media';

function mountedMedia(): string[] {
  if (!existsSync(MEDIA_DIR)) return [];
  return readdirSync(MEDIA_DIR, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => join(MEDIA_DIR, e.name))
    .sort();
}

export const FIRSTBOOT_HELP = `Usage: sovereign firstboot [--source DIR ...] [--tls-name NAME ...] [options]

Prepares the device to serve, each step only if it is not done yet:
  state      create the data directory
  audit-key  create the audit signing key in the TPM (audit.tcti) when none exists (or the software key)
  models     import models from each --source DIR (default: each directory in ${MEDIA_DIR}, where the
             image mounts a models partition and USB disks): signed bundles (bundle.json, in DIR or one
             level down; trusted keys in models.bundleKeys) and model files whose manifest entry pins a checksum
  tls        for the HTTPS postures, a P-256 key and a self-signed certificate at tls.key / tls.cert when
             neither exists (names: --tls-name, else this host's name and addresses)
Then prints the audit public key and its fingerprint (and the certificate's) for the installer to record, and
writes the report to <dataDir>/firstboot.json. Exits 1 if a step failed (the others still ran).

${COMMON_HELP}`;

export async function firstbootCommand(argv: string[]): Promise<number> {
  const { values: parsed, positionals } = parse(argv, {
    ...CONFIG_OPTIONS,
    source: { type: 'string', multiple: true },
    'tls-name': { type: 'string', multiple: true },
  });
  const values = parsed as typeof parsed & { source?: string[]; 'tls-name'?: string[] };
  if (values.help) {
    process.stdout.write(`${FIRSTBOOT_HELP}\n`);
    return 0;
  }
  if (positionals.length) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  const json = values.json === true;
  const { config } = loadConfig(configFlags(values));
  const manifest = loadManifest(manifestPath(config));
  const say = (line: string) => {
    if (!json) process.stdout.write(`${line}\n`);
  };
  say(`Sovereign first boot (${config.posture} posture, data in ${config.dataDir})`);
  const report = await firstBoot({
    config,
    manifest,
    sources: values.source ?? mountedMedia(),
    say,
    ...(values['tls-name']?.length ? { tlsNames: values['tls-name'] } : {}),
  });
  if (json) printJson(report);
  else {
    const lines = ['', 'Record these:'];
    if (report.auditKey) lines.push(`  audit public key   ${report.auditKey.fingerprint}`);
    else lines.push('  audit public key   NONE: checkpoints cannot be signed until the audit-key step succeeds');
    if (report.tlsCertificate) lines.push(`  TLS certificate    ${report.tlsCertificate.fingerprint}`);
    if (report.auditKey) lines.push('', report.auditKey.publicKeyPem.trimEnd());
    lines.push('', `Report: ${reportFile(config)}${report.ok ? '' : ' (a step FAILED; see above)'}`);
    process.stdout.write(`${lines.join('\n')}\n`);
  }
  return report.ok ? 0 : 1;
}
