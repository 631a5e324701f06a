import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';

/** A certificate file's SHA-256 fingerprint as installers record it: `SHA256:` and the DER's digest, colon-separated. */
export function certificateFingerprint(file: string): string {
  return `SHA256:${new X509Certificate(readFileSync(file)).fingerprint256.toLowerCase()}`;
}
