// Models bundles: model files and a signed manifest on a disk, to carry models onto a sealed device by hand. The
// sender signs bundle.json with an Ed25519 key (`sovereign models bundle-key`); a device imports a bundle only when
// a key it trusts (config models.bundleKeys) signed it, and each file only when its size and SHA-256 match both the
// signed bundle and the device's own manifest. Nothing in a bundle can add a model the device's manifest lacks.
//
//   <bundle>/bundle.json   {"format": "sovereign-models-bundle/1", "created": ..., "models": [manifest entries]}
//   <bundle>/bundle.sig    {"algorithm": "ed25519", "key": "<SPKI fingerprint>", "signature": "<base64>"}
//   <bundle>/models/<file>
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { spkiFingerprint } from '../audit/provision.js';
import { copyHashing, importModel, ImportError } from './import.js';
import { checkManifest, type Manifest, type ManifestEntry } from './manifest.js';
import type { ModelVerifier, Progress } from './verify.js';

export const BUNDLE_FILE = 'bundle.json';
export const BUNDLE_SIGNATURE_FILE = 'bundle.sig';
const FORMAT = 'sovereign-models-bundle/1';
/** bundle.json holds entries, not models: anything larger is not one of ours. */
const MAX_DOCUMENT_BYTES = 4 * 1024 * 1024;

type PinnedEntry = ManifestEntry & { sha256: string; size: number };

interface BundleDocument {
  format: string;
  created: string;
  models: PinnedEntry[];
}

export interface WrittenBundle {
  dir: string;
  fingerprint: string;
  models: Array<{ id: string; file: string; size: number; sha256: string }>;
}

export interface BundleImport {
  /** The trusted key that signed the bundle. */
  fingerprint: string;
  created: string;
  models: Array<{ id: string; file: string; sha256: string; outcome: 'imported' | 'present' }>;
}

/** Creates an Ed25519 signing key for bundles: PREFIX.key (private, 0600, never overwritten) and PREFIX.pub. */
export function createBundleKey(prefix: string): { privateKeyFile: string; publicKeyFile: string; fingerprint: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const privateKeyFile = `${prefix}.key`;
  const publicKeyFile = `${prefix}.pub`;
  const publicPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  try {
    writeFileSync(privateKeyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
    writeFileSync(publicKeyFile, publicPem, { flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST')
      throw new ImportError(`${privateKeyFile} or ${publicKeyFile} exists; a key is never overwritten`);
    throw err;
  }
  return { privateKeyFile, publicKeyFile, fingerprint: spkiFingerprint(publicPem) };
}

/** Writes the chosen models (all present ones when ids is empty) and the signed manifest into an empty directory. */
export async function writeBundle(options: {
  outDir: string;
  ids: string[];
  manifest: Manifest;
  modelsDir: string;
  verifier: ModelVerifier;
  signingKeyFile: string;
  onProgress?: (id: string) => Progress;
  now?: Date;
}): Promise<WrittenBundle> {
  const { outDir, manifest, modelsDir, verifier } = options;
  let key;
  try {
    key = createPrivateKey(readFileSync(options.signingKeyFile));
  } catch (err) {
    throw new ImportError(`cannot read the signing key ${options.signingKeyFile}: ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    throw new ImportError(
      `${options.signingKeyFile} is a ${key.asymmetricKeyType} key; bundles are signed with Ed25519 (sovereign models bundle-key)`,
    );
  }
  const chosen = options.ids.length
    ? options.ids.map((id) => {
        const entry = manifest.models.find((m) => m.id === id);
        if (!entry) throw new ImportError(`no model '${id}' in the manifest; known ids: ${manifest.models.map((m) => m.id).join(', ')}`);
        if (!existsSync(join(modelsDir, entry.file)))
          throw new ImportError(`'${id}' is not in ${modelsDir} (${entry.file}); import it first`);
        return entry;
      })
    : manifest.models.filter((m) => existsSync(join(modelsDir, m.file)));
  if (!chosen.length) throw new ImportError(`no manifest model is present in ${modelsDir}: nothing to bundle`);
  if (existsSync(outDir) && readdirSync(outDir).length)
    throw new ImportError(`${outDir} is not empty; a bundle is written into an empty directory`);
  mkdirSync(join(outDir, 'models'), { recursive: true });

  const models: PinnedEntry[] = [];
  for (const entry of chosen) {
    const source = join(modelsDir, entry.file);
    const size = statSync(source).size;
    const sha256 = await copyHashing(source, join(outDir, 'models', entry.file), size, options.onProgress?.(entry.id));
    const trusted = entry.sha256 ?? verifier.pin(entry.id)?.sha256 ?? null;
    if (trusted !== null && trusted !== sha256) {
      throw new ImportError(
        `${source} has SHA-256 ${sha256}, not the ${trusted} this device trusts for '${entry.id}'; it was altered. No bundle was written.`,
      );
    }
    models.push({ ...entry, sha256, size });
  }
  const document: BundleDocument = { format: FORMAT, created: (options.now ?? new Date()).toISOString(), models };
  const bytes = Buffer.from(`${JSON.stringify(document, null, 2)}\n`);
  const publicPem = createPublicKey(key).export({ type: 'spki', format: 'pem' }).toString();
  const fingerprint = spkiFingerprint(publicPem);
  writeDurably(join(outDir, BUNDLE_FILE), bytes);
  // The signature is written last: a bundle cut short has none and is refused.
  const signature = { algorithm: 'ed25519', key: fingerprint, signature: sign(null, bytes, key).toString('base64') };
  writeDurably(join(outDir, BUNDLE_SIGNATURE_FILE), Buffer.from(`${JSON.stringify(signature, null, 2)}\n`));
  return { dir: outDir, fingerprint, models: models.map(({ id, file, size, sha256 }) => ({ id, file, size, sha256 })) };
}

/** bundle.json, once its signature verifies with one of the trusted public keys (PEM). */
export function readBundle(dir: string, trustedPems: string[]): { document: BundleDocument; fingerprint: string } {
  const documentFile = join(dir, BUNDLE_FILE);
  const signatureFile = join(dir, BUNDLE_SIGNATURE_FILE);
  if (!existsSync(documentFile)) throw new ImportError(`${dir} is not a models bundle (no ${BUNDLE_FILE})`);
  if (statSync(documentFile).size > MAX_DOCUMENT_BYTES) throw new ImportError(`${documentFile} is too large to be a bundle manifest`);
  if (!existsSync(signatureFile))
    throw new ImportError(`${dir} has no ${BUNDLE_SIGNATURE_FILE}: an unsigned or unfinished bundle is never imported`);
  if (!trustedPems.length) {
    throw new ImportError('no bundle key is trusted here: list the sender’s public key in models.bundleKeys (or pass --trust FILE)');
  }
  const bytes = readFileSync(documentFile);
  let signature: { algorithm?: unknown; key?: unknown; signature?: unknown };
  try {
    signature = JSON.parse(readFileSync(signatureFile, 'utf8')) as typeof signature;
  } catch {
    throw new ImportError(`${signatureFile} is not valid JSON`);
  }
  if (signature.algorithm !== 'ed25519' || typeof signature.key !== 'string' || typeof signature.signature !== 'string') {
    throw new ImportError(`${signatureFile} is not an Ed25519 bundle signature`);
  }
  const trusted = trustedPems.find((pem) => spkiFingerprint(pem) === signature.key);
  if (!trusted) throw new ImportError(`the bundle is signed by ${signature.key}, a key this device does not trust`);
  if (!verify(null, bytes, createPublicKey(trusted), Buffer.from(signature.signature, 'base64'))) {
    throw new ImportError(`the signature of ${BUNDLE_FILE} does not verify: it was changed after it was signed`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new ImportError(`${documentFile} is not valid JSON`);
  }
  const document = parsed as Partial<BundleDocument>;
  if (document.format !== FORMAT) throw new ImportError(`${documentFile} is not in format ${FORMAT}`);
  const { models } = checkManifest({ models: document.models }, documentFile);
  for (const m of models) {
    if (m.sha256 === null || m.size === null) throw new ImportError(`${documentFile}: '${m.id}' has no size or SHA-256`);
  }
  return { document: { format: FORMAT, created: String(document.created), models: models as PinnedEntry[] }, fingerprint: signature.key };
}

/**
 * Imports a signed bundle into the models dir. Every entry is checked against the device's manifest before any file
 * is copied; a model already present with the same SHA-256 is left as it is.
 */
export async function importBundle(options: {
  dir: string;
  trustedPems: string[];
  manifest: Manifest;
  modelsDir: string;
  verifier: ModelVerifier;
  onProgress?: (id: string) => Progress;
}): Promise<BundleImport> {
  const { dir, manifest, modelsDir, verifier } = options;
  const { document, fingerprint } = readBundle(dir, options.trustedPems);
  for (const entry of document.models) {
    const own = manifest.models.find((m) => m.id === entry.id);
    if (!own) throw new ImportError(`the bundle holds '${entry.id}', which this device's manifest does not list; nothing was imported`);
    if (own.file !== entry.file)
      throw new ImportError(`the bundle's '${entry.id}' is ${entry.file}; this device's manifest says ${own.file}`);
    if (own.sha256 !== null && own.sha256 !== entry.sha256) {
      throw new ImportError(
        `the bundle's '${entry.id}' (SHA-256 ${entry.sha256}) is not the file this device's manifest names (${own.sha256})`,
      );
    }
    if (!existsSync(join(dir, 'models', entry.file))) throw new ImportError(`the bundle lacks models/${entry.file}`);
  }
  const models: BundleImport['models'] = [];
  for (const entry of document.models) {
    const destination = join(modelsDir, entry.file);
    if (existsSync(destination) && (await verifier.sha256(destination)).sha256 === entry.sha256) {
      models.push({ id: entry.id, file: entry.file, sha256: entry.sha256, outcome: 'present' });
      continue;
    }
    const progress = options.onProgress?.(entry.id);
    await importModel({
      source: join(dir, 'models', entry.file),
      id: entry.id,
      manifest,
      modelsDir,
      verifier,
      expected: { sha256: entry.sha256, size: entry.size },
      ...(progress ? { onProgress: progress } : {}),
    });
    models.push({ id: entry.id, file: entry.file, sha256: entry.sha256, outcome: 'imported' });
  }
  return { fingerprint, created: document.created, models };
}

function writeDurably(path: string, bytes: Buffer): void {
  const fd = openSync(path, 'w', 0o644);
  try {
    writeFileSync(fd, bytes);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
