// The audit signing key's life on a device: provisioned once in the TPM (init-tpm, and first boot when none exists),
// its public half kept in the data directory for verifiers, and its fingerprint shown to the installer who records it.
import { createHash, createPublicKey } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { openStore } from '../store/index.js';
import { keyIdOf, SoftwareSigner, TpmSigner } from './signer.js';
import { softwareKeyFile, tpmOptions } from './index.js';

export function auditPublicKeyFile(config: Config): string {
  return join(config.dataDir, 'audit-public-key.pem');
}

export function attestationKeyFile(config: Config): string {
  return join(config.dataDir, 'audit-attestation-key.pem');
}

/** SHA-256 of the key's SubjectPublicKeyInfo, as `SHA256:` and hex pairs: what an installer reads out and records. */
export function spkiFingerprint(publicKeyPem: string): string {
  const der = createPublicKey(publicKeyPem).export({ type: 'spki', format: 'der' });
  return `SHA256:${(createHash('sha256').update(der).digest('hex').match(/../g) ?? []).join(':')}`;
}

/**
 * Creates the TPM's signing and attestation keys and writes their public halves to the data directory. A replaced
 * key's public half stays, under its key ID, so the checkpoints it signed still verify.
 */
export async function provisionTpmKey(
  config: Config,
  replace: boolean,
  say: (line: string) => void,
): Promise<{
  publicKeyFile: string;
  attestationKeyFile: string;
  publicKeyPem: string;
  attestationKeyPem: string;
  /** The key ID (hex) of the key this one replaces, if the data directory had one. */
  replaced: string | null;
}> {
  const keys = await TpmSigner.provision(tpmOptions(config), replace, say);
  const file = auditPublicKeyFile(config);
  const akFile = attestationKeyFile(config);
  await openStore(config.dataDir).close(); // creates the data directory with its permissions
  let replaced: string | null = null;
  if (existsSync(file)) {
    replaced = keyIdOf(readFileSync(file, 'utf8')).toString('hex');
    renameSync(file, join(config.dataDir, `audit-public-key.${replaced}.pem`));
  }
  writeFileSync(file, keys.publicKeyPem);
  writeFileSync(akFile, keys.attestationKeyPem);
  return { publicKeyFile: file, attestationKeyFile: akFile, ...keys, replaced };
}

/** The audit key's public half if the device has one: init-tpm's file, or the software key (created here if absent). */
export function currentAuditPublicKey(config: Config, createSoftware: boolean): string | null {
  if (config.audit.signer === 'software') {
    if (!createSoftware && !existsSync(softwareKeyFile(config))) return null;
    return new SoftwareSigner(softwareKeyFile(config)).publicKeyPem;
  }
  const file = auditPublicKeyFile(config);
  return existsSync(file) ? readFileSync(file, 'utf8') : null;
}
