// What the boot entry says about the run that starts: the version, a digest of the effective configuration (secrets
// left out, so the digest can be published and compared), the posture, the region, the signer, and how the run
// before ended. The digests of the model files served follow in a `boot.models` entry once they are verified
// (verification runs after the daemon listens).
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Config } from '../config/index.js';
import { canonicalJson, type Canonical } from './canonical.js';
import type { EntryFields } from './index.js';
import type { Signer } from './signer.js';

/** The product's version, from the package.json shipped beside dist/. */
export function productVersion(): string {
  const file = join(import.meta.dirname, '..', '..', 'package.json');
  try {
    return (JSON.parse(readFileSync(file, 'utf8')) as { version?: string }).version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * The configuration's secrets. None is a value of the configuration itself: each is a file it names (tls.key,
 * limits.redis.passwordFile, upstreams[].apiKeyFile, and the audit signing key in the data directory), and the
 * schema refuses credentials where a value could carry them (limits.redis.url takes no user information). So the
 * digest covers every value, these files' paths included, and never reads the files: a changed secret leaves it as
 * it was, any other change moves it.
 */
export const SECRET_FILES = ['tls.key', 'limits.redis.passwordFile', 'upstreams[].apiKeyFile', '<dataDir>/audit-signing-key.pem'] as const;

/** SHA-256 (hex) of the effective configuration as canonical JSON (see SECRET_FILES). */
export function configDigest(config: Config): string {
  return createHash('sha256')
    .update(canonicalJson(config as unknown as Canonical))
    .digest('hex');
}

export interface BootFacts {
  config: Config;
  boot: number;
  previousStop: 'clean' | 'crash' | null;
  signer: Signer | null;
}

export function bootFields({ config, boot, previousStop, signer }: BootFacts): EntryFields {
  return {
    boot,
    version: productVersion(),
    config_sha256: configDigest(config),
    posture: config.posture,
    previous_stop: previousStop,
    signer: signer ? { kind: signer.kind, key_id: signer.keyId.toString('hex') } : null,
  };
}
