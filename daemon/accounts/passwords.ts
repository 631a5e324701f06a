// Passwords are stored as scrypt hashes (memory-hard, in node:crypto). The work runs on libuv's thread pool, so a
// sign-in does not stall the event loop. The encoded form carries its parameters, so they can be raised later
// without invalidating existing hashes.
import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';

const N = 2 ** 15;
const R = 8;
const P = 1;
const KEY_BYTES = 32;
// scrypt needs 128 × N × r bytes; node's default ceiling (32 MiB) is exactly that, and it refuses at the ceiling.
const MAX_MEM = 64 * 1024 * 1024;

export const MIN_PASSWORD_LENGTH = 12;
export const MAX_PASSWORD_LENGTH = 1024;

function derive(password: string, salt: Buffer, n: number, r: number, p: number, length: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    scrypt(password.normalize('NFC'), salt, length, { N: n, r, p, maxmem: MAX_MEM }, (err, key) => (err ? reject(err) : resolve(key)));
  });
}

/** `scrypt$N$r$p$salt$hash`, salt and hash in base64url. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, N, R, P, KEY_BYTES);
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

// A hash for accounts that do not exist, so a sign-in with an unknown email costs the same as one with a wrong
// password and the timing does not tell which accounts exist.
let dummy: Promise<string> | null = null;

export async function verifyPassword(password: string, encoded: string | undefined): Promise<boolean> {
  dummy ??= hashPassword('not a password of any account');
  const parts = (encoded ?? (await dummy)).split('$');
  if (parts.length !== 6 || parts[0] !== 'scrypt') return false;
  const [n, r, p] = parts.slice(1, 4).map(Number) as [number, number, number];
  const expected = Buffer.from(parts[5]!, 'base64url');
  const key = await derive(password, Buffer.from(parts[4]!, 'base64url'), n, r, p, expected.length);
  return timingSafeEqual(key, expected) && encoded !== undefined;
}

/** Why a new password is not acceptable, or null. */
export function passwordProblem(password: string): string | null {
  if (password.length < MIN_PASSWORD_LENGTH) return `The password must have at least ${MIN_PASSWORD_LENGTH} characters.`;
  if (password.length > MAX_PASSWORD_LENGTH) return `The password must have at most ${MAX_PASSWORD_LENGTH} characters.`;
  return null;
}
