// What an appliance does before it first serves (and again at every boot, where each step finds its work done):
// make the state directory, create the audit signing key in the TPM if there is none, import models from a models
// partition or a USB bundle, make the TLS certificate the HTTPS postures need if the operator provisioned none, and
// tell the installer the fingerprints to record. The filesystem of the data partition is made before this, as root
// (image-build/rootfs/usr/lib/sovereign/data-partition); this part runs as the daemon's user.
import { generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { hostname as osHostname, networkInterfaces } from 'node:os';
import { dirname, join } from 'node:path';
import { isIP } from 'node:net';
import { execa } from 'execa';
import { keyIdOf } from '../audit/index.js';
import { AuditOutbox, queueEvent } from '../audit/outbox.js';
import { currentAuditPublicKey, provisionTpmKey, spkiFingerprint } from '../audit/provision.js';
import { bundleImportedFields, modelImportedFields } from '../models/audit.js';
import { modelsDir as modelsDirOf, type Config } from '../config/index.js';
import { BUNDLE_FILE, importBundle, importModel, ModelVerifier, type Manifest } from '../models/index.js';
import { certificateFingerprint } from '../net/index.js';
import { openStore } from '../store/index.js';

export type StepName = 'state' | 'audit-key' | 'models' | 'tls';

export interface StepReport {
  step: StepName;
  outcome: 'done' | 'skipped' | 'failed';
  detail: string;
}

export interface FirstBootReport {
  at: string;
  ok: boolean;
  steps: StepReport[];
  auditKey: { publicKeyPem: string; fingerprint: string } | null;
  tlsCertificate: { file: string; fingerprint: string } | null;
}

export interface FirstBootOptions {
  config: Config;
  manifest: Manifest;
  /** Directories that may hold a signed bundle (directly or one level down) or model files; missing ones are skipped. */
  sources: string[];
  say: (line: string) => void;
  /** The names the certificate is made for; by default this host's name and its non-loopback addresses. */
  tlsNames?: string[];
  now?: () => Date;
}

/** The report of the last run, kept in the data directory. */
export function reportFile(config: Config): string {
  return join(config.dataDir, 'firstboot.json');
}

/** What a step's work says: its outcome and the line that tells it. */
type StepResult = [StepReport['outcome'], string];

/** The fingerprints the installer records, as the steps find or make them (kept even when a later part fails). */
interface Found {
  auditKey: FirstBootReport['auditKey'];
  tlsCertificate: FirstBootReport['tlsCertificate'];
}

export async function firstBoot(options: FirstBootOptions): Promise<FirstBootReport> {
  const { config, say } = options;
  const steps: StepReport[] = [];
  const record = (step: StepName, outcome: StepReport['outcome'], detail: string) => {
    steps.push({ step, outcome, detail });
    say(`${step.padEnd(9)} ${outcome === 'failed' ? 'FAILED: ' : ''}${detail}`);
  };
  // A step that fails is reported, and the steps after it still run.
  const attempt = async (step: StepName, work: () => Promise<StepResult>) => {
    try {
      const [outcome, detail] = await work();
      record(step, outcome, detail);
    } catch (err) {
      record(step, 'failed', (err as Error).message);
    }
  };
  const found: Found = { auditKey: null, tlsCertificate: null };
  await attempt('state', () => stateStep(config));
  await attempt('audit-key', () => auditKeyStep(config, found));
  await attempt('models', () => importFromSources(options));
  await attempt('tls', () => tlsStep(options, found));

  const report: FirstBootReport = {
    at: (options.now?.() ?? new Date()).toISOString(),
    ok: steps.every((s) => s.outcome !== 'failed'),
    steps,
    auditKey: found.auditKey,
    tlsCertificate: found.tlsCertificate,
  };
  if (existsSync(config.dataDir)) writeFileSync(reportFile(config), `${JSON.stringify(report, null, 2)}\n`, { mode: 0o600 });
  return report;
}

/** Makes the state directory (opening the store creates it). */
async function stateStep(config: Config): Promise<StepResult> {
  const existed = existsSync(config.dataDir) && readdirSync(config.dataDir).length > 0;
  await openStore(config.dataDir).close();
  return existed ? ['skipped', `${config.dataDir} in place`] : ['done', `${config.dataDir} created`];
}

/** Finds the audit signing key, or creates it (a file for the software signer, else in the TPM) and queues its event. */
async function auditKeyStep(config: Config, found: Found): Promise<StepResult> {
  const existing = currentAuditPublicKey(config, false);
  if (existing) {
    found.auditKey = { publicKeyPem: existing, fingerprint: spkiFingerprint(existing) };
    return ['skipped', `the ${config.audit.signer} key is in place`];
  }
  if (config.audit.signer === 'software') {
    const pem = currentAuditPublicKey(config, true)!;
    found.auditKey = { publicKeyPem: pem, fingerprint: spkiFingerprint(pem) };
    await queueEvent(config.dataDir, 'audit.key', {
      by: 'firstboot',
      signer: 'software',
      key_id: keyIdOf(pem).toString('hex'),
      replaced: null,
    });
    return ['done', 'software signing key created (audit.signer is software: the key is a file, not in a TPM)'];
  }
  const keys = await provisionTpmKey(config, false, () => {});
  found.auditKey = { publicKeyPem: keys.publicKeyPem, fingerprint: spkiFingerprint(keys.publicKeyPem) };
  await queueEvent(config.dataDir, 'audit.key', {
    by: 'firstboot',
    signer: 'tpm',
    key_id: keyIdOf(keys.publicKeyPem).toString('hex'),
    replaced: keys.replaced,
  });
  return ['done', `signing key created in the TPM at ${config.audit.keyHandle} (${config.audit.tcti})`];
}

/** Finds the TLS certificate an HTTPS posture serves, or makes a self-signed one; a key without its certificate (or the reverse) fails. */
async function tlsStep(options: FirstBootOptions, found: Found): Promise<StepResult> {
  const { config } = options;
  const tls = config.tls;
  if (config.posture === 'device' || !tls) return ['skipped', `the ${config.posture} posture serves no TLS`];
  const [hasCert, hasKey] = [existsSync(tls.cert), existsSync(tls.key)];
  if (hasCert !== hasKey) {
    throw new Error(`${hasCert ? tls.cert : tls.key} exists without its ${hasCert ? 'key' : 'certificate'}; provide both or neither`);
  }
  if (hasCert) {
    found.tlsCertificate = { file: tls.cert, fingerprint: certificateFingerprint(tls.cert) };
    return ['skipped', `certificate ${tls.cert} in place`];
  }
  const names = options.tlsNames ?? defaultTlsNames(config);
  await makeCertificate(tls.cert, tls.key, names);
  found.tlsCertificate = { file: tls.cert, fingerprint: certificateFingerprint(tls.cert) };
  return ['done', `self-signed certificate made for ${names.join(', ')}; replace it with one from your CA at any time`];
}

/** Imports every signed bundle and every pinned model file found in the sources. */
async function importFromSources(options: FirstBootOptions): Promise<StepResult> {
  const { config, manifest, say } = options;
  const modelsDir = modelsDirOf(config);
  const trustedPems = config.models.bundleKeys.map((f) => readFileSync(f, 'utf8'));
  const done: string[] = [];
  // Model files are gigabytes: the console shows how far each copy is (every 256 MiB, as `models import` does).
  const progress = (id: string) => (copied: number, total: number) => {
    if (total >= 256 * 1024 ** 2) say(`models    ${id}: ${Math.round((copied / total) * 100)}% of ${(total / 1024 ** 3).toFixed(2)} GiB`);
  };
  const store = openStore(config.dataDir);
  try {
    const verifier = new ModelVerifier(store);
    const outbox = new AuditOutbox(store);
    for (const source of options.sources.filter((s) => existsSync(s) && statSync(s).isDirectory())) {
      const bundles = [source, ...subdirectories(source)].filter((d) => existsSync(join(d, BUNDLE_FILE)));
      for (const dir of bundles) {
        say(`models    checking the bundle in ${dir}`);
        const result = await importBundle({ dir, trustedPems, manifest, modelsDir, verifier, onProgress: progress });
        if (result.models.some((m) => m.outcome === 'imported'))
          outbox.put('bundle.imported', { by: 'firstboot', ...bundleImportedFields(result, dir) });
        for (const m of result.models) done.push(`${m.id} (${m.outcome === 'present' ? 'already present' : `imported from ${dir}`})`);
      }
      if (bundles.includes(source)) continue;
      // Loose files: only those whose manifest entry pins a checksum; anything else must come in a signed bundle.
      for (const name of readdirSync(source)) {
        const entry = manifest.models.find((m) => m.file === name);
        if (!entry) continue;
        if (entry.sha256 === null) {
          throw new Error(`${join(source, name)}: the manifest pins no checksum for '${entry.id}'; bring it in a signed bundle`);
        }
        const destination = join(modelsDir, entry.file);
        if (existsSync(destination) && (await verifier.sha256(destination)).sha256 === entry.sha256) {
          done.push(`${entry.id} (already present)`);
          continue;
        }
        say(`models    importing ${entry.id} from ${source}`);
        const imported = await importModel({
          source: join(source, name),
          id: entry.id,
          manifest,
          modelsDir,
          verifier,
          onProgress: progress(entry.id),
        });
        outbox.put('model.imported', { by: 'firstboot', ...modelImportedFields(imported) });
        done.push(`${entry.id} (imported from ${source})`);
      }
    }
  } finally {
    await store.close();
  }
  if (!done.length) return ['skipped', `no bundle or model file in ${options.sources.join(', ') || '(no sources)'}`];
  return [done.some((d) => d.includes('imported')) ? 'done' : 'skipped', done.join('; ')];
}

function subdirectories(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => join(dir, e.name))
    .sort();
}

function defaultTlsNames(config: Config): string[] {
  const names = new Set<string>([osHostname()]);
  const host = config.listen.host;
  if (host && isIP(host) && host !== '0.0.0.0' && host !== '::') names.add(host);
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (!a.internal && !a.address.startsWith('fe80:')) names.add(a.address);
  }
  return [...names];
}

/** A P-256 key (written 0600 before openssl sees it) and a self-signed certificate for the names, valid ten years. */
async function makeCertificate(certFile: string, keyFile: string, names: string[]): Promise<void> {
  for (const dir of new Set([dirname(certFile), dirname(keyFile)])) mkdirSync(dir, { recursive: true, mode: 0o700 });
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  writeFileSync(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
  const san = names.map((n) => (isIP(n) ? `IP:${n}` : `DNS:${n}`)).join(',');
  await execa(
    'openssl',
    [
      'req',
      '-x509',
      '-new',
      '-key',
      keyFile,
      '-sha256',
      '-days',
      '3650',
      '-subj',
      `/CN=${names[0] ?? 'sovereign'}`,
      '-addext',
      `subjectAltName=${san}`,
      '-out',
      certFile,
    ],
    { stdin: 'ignore' },
  );
}
