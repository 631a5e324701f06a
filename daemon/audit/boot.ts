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
 * Configuration values that are secret, or may hold one, and are left out of the digest. The configuration names
 * files for its secrets (tls.key, limits.redis.passwordFile, upstreams[].apiKeyFile, the audit key) and those paths
 * are digested, never the files; the one value that may carry a secret itself is the Redis URL's user information
 * (`redis://user:password@host`), which is cut out of it before digesting.
 */
export const SECRET_CONFIG_KEYS = ['limits.redis.url (its user:password part)'] as const;

function withoutSecrets(config: Config): Config {
  const redis = config.limits.redis;
  if (!redis) return config;
  let url = redis.url;
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    url = parsed.toString();
  } catch {
    // Not a URL the config would accept; nothing in it is read as credentials.
    url = url.replace(/\/\/[^/@]*@/, '//');
  }
  return { ...config, limits: { ...config.limits, redis: { ...redis, url } } };
}

/** SHA-256 (hex) of the effective configuration as canonical JSON, with SECRET_CONFIG_KEYS left out. */
export function configDigest(config: Config): string {
  return createHash('sha256')
    .update(canonicalJson(withoutSecrets(config) as unknown as Canonical))
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
