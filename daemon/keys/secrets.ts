// Key material. A secret is `sk-sov-<idpart>-<43 base64url chars>`: the public id travels inside it so lookup is one
// read, and 256 random bits make a fast hash (SHA-256) as safe to store as a slow KDF would be for a password.
import { hash, randomBytes } from 'node:crypto';

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const ID_CHARS = 16;
const SECRET_PREFIX = 'sk-sov-';
const SECRET_SHAPE = /^sk-sov-([a-z2-7]{16})-([A-Za-z0-9_-]{43})$/;

export function randomId(prefix: string): string {
  const bytes = randomBytes(ID_CHARS);
  let out = '';
  for (const b of bytes) out += BASE32[b & 31];
  return `${prefix}_${out}`;
}

export function newSecret(keyId: string): string {
  return `${SECRET_PREFIX}${keyId.slice('key_'.length)}-${randomBytes(32).toString('base64url')}`;
}

export function hashSecret(secret: string): Buffer {
  return hash('sha256', secret, 'buffer');
}

/** The public key id a presented secret claims, or null when it does not have our shape. */
export function keyIdOf(secret: string): string | null {
  const m = SECRET_SHAPE.exec(secret);
  return m ? `key_${m[1]}` : null;
}

/**
 * A secret's SHA-256 as the string a call's check compares: base64, the cheapest of the digest's encodings for Node
 * to make on every call (a Buffer costs twice as much, and two native comparisons more).
 */
export function secretDigest(secret: string): string {
  return hash('sha256', secret, 'base64');
}

/**
 * What an absent key is compared with, so that the comparison costs the same for an unknown id as for a known one.
 * (Reading an unknown id's record still costs an lmdb read where a known one is cached: key ids are not secret.)
 */
const NO_DIGEST = '\0'.repeat(44);

/**
 * Constant-time comparison of a presented secret's digest against a stored one (`secretDigest`'s form): every
 * character is compared whatever differs, so timing does not tell how much matched, nor whether a key exists.
 */
export function digestMatches(presented: string, stored: string | undefined): boolean {
  const against = stored !== undefined && stored.length === NO_DIGEST.length ? stored : NO_DIGEST;
  if (presented.length !== NO_DIGEST.length) return false;
  let differ = 0;
  for (let i = 0; i < NO_DIGEST.length; i++) differ |= presented.charCodeAt(i) ^ against.charCodeAt(i);
  return differ === 0 && against !== NO_DIGEST;
}

/** Constant-time equality of two strings: every character is compared whatever differs (their lengths are not secret). */
export function sameSecret(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let differ = 0;
  for (let i = 0; i < a.length; i++) differ |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return differ === 0;
}

/** What can be shown of a secret in listings: enough to recognise it, not enough to use it. */
export function redact(secret: string): string {
  return `${secret.slice(0, SECRET_PREFIX.length + 4)}…${secret.slice(-4)}`;
}
