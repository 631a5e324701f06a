#!/usr/bin/env node
// verify-anchors.mjs: checks a Sovereign appliance's audit log on any machine with Node ≥ 20, offline, with no
// dependencies (copy this one file to the air-gapped machine). Given the appliance's public key and either an
// export (`sovereign audit export --out DIR`) or the JSON of GET /v1/audit/anchors (or of ?leaf=N, one call's
// receipt), it checks:
//   - every checkpoint's signature (ECDSA P-256 over SHA-256 of the note text) and key ID,
//   - that each checkpoint's text matches its fields and names the log's origin,
//   - every consistency proof between successive checkpoints (RFC 9162), and that sizes never go back,
//   - with an export, every entry: the root recomputed from all entries matches every checkpoint,
//   - with a receipt, the entry's inclusion proof against the checkpoint that covers it,
//   - with --state FILE, that the log still extends the last checkpoint this script trusted (a fork, a rollback or
//     a truncated and regrown log fails), and then records the newest one,
//   - with --ak FILE (the TPM attestation key from `sovereign audit init-tpm`), that every checkpoint carries a TPM
//     quote of its own text by that key, and that the TPM's clock never goes back without a TPM reset.
// With an export it also lists every stream that started and has no end entry ("stream cut off: …"): one cut short
// when the daemon died (a crash, kill -9, power loss), or one still running when the export was made. That is a fact
// to report, not tampering: it fails nothing.
// It prints what it checked, names the first failure, and exits 1 on any failure, 2 on wrong usage.
//
//   node verify-anchors.mjs --key public-key.pem --export DIR [--state FILE] [--require-tpm] [--ak FILE]
//   node verify-anchors.mjs --key public-key.pem --anchors anchors.json [--state FILE] [--require-tpm] [--ak FILE]
//   node verify-anchors.mjs --key public-key.pem --receipt receipt.json [--require-tpm] [--ak FILE]
//
// A cluster (store: "postgres") keeps one log per replica, each under its own origin and signed by its own key, and
// each replica publishes its newest checkpoint to the others (an export's logs.json, the endpoint's `logs`). Given
// every replica's key and several exports or anchors files (or --cluster), it checks each log on its own as above,
// then that each key signs one log only, that no two checkpoints of one origin disagree (a fork: the same size with
// another root, or a checkpoint that is not the tree of that log's exported entries), and that no log went silent
// (its newest checkpoint older than the newest of the set by more than two of its heartbeats). It reports every
// problem, not only the first; exit 1 on a failure or a fork, 3 when all verifies but a log is silent (0 with
// --silent-ok), 2 on wrong usage:
//
//   node verify-anchors.mjs --key a.pem --key b.pem --export DIR_A --export DIR_B [--anchors FILE ...] [--require-tpm]
//     [--silent-after MS] [--silent-ok]
//
// The same file also runs in a web browser (the dashboard verifies the log in the page with this very code):
//
//   import { verify, Failure } from './verify-anchors.mjs';
//   const { lines, latest } = await verify({ keyPems, anchors, entries, state, requireTpm, akPem });
//
// where entries are the lines of entries.jsonl as UTF-8 bytes (Uint8Array). So the checks use only what Node ≥ 20
// and browsers share: Uint8Array, btoa, TextEncoder and WebCrypto for signatures, and SHA-256 in plain
// JavaScript below (the Merkle code hashes hundreds of thousands of times and stays synchronous). Node's own modules
// are imported only in main(), when it runs as a program.

/** The first thing that is wrong with the log (anything else thrown is a failure to verify at all). */
export class Failure extends Error {}

const encoder = new TextEncoder();
const utf8 = (text) => encoder.encode(text);
const toHex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
const toBase64 = (bytes) => btoa(Array.from(bytes, (b) => String.fromCharCode(b)).join(''));
const equal = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// Base64 is decoded as Node's Buffer.from(text, 'base64') decodes it, which earlier versions of this script used:
// both alphabets, other characters skipped, stop at the first '=', a partial last group kept. So the same input gives
// the same verdict and the same message. Where exact form matters (a note's root line) the caller re-encodes and
// compares.
const BASE64_VALUES = new Int8Array(256).fill(-1);
for (const [i, c] of [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'].entries()) {
  BASE64_VALUES[c.charCodeAt(0)] = i;
}
BASE64_VALUES['-'.charCodeAt(0)] = 62;
BASE64_VALUES['_'.charCodeAt(0)] = 63;
function fromBase64(text) {
  if (typeof text !== 'string') throw new TypeError(`expected a base64 string, got ${text === null ? 'null' : typeof text}`);
  const out = new Uint8Array(Math.ceil((text.length * 3) / 4));
  let length = 0;
  let bits = 0;
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i) & 0xff; // Node reads a UTF-16 code unit's low byte
    if (c === 0x3d) break; // '='
    const value = BASE64_VALUES[c];
    if (value < 0) continue;
    bits = (bits << 6) | value;
    if (++count % 4 === 0) {
      out[length++] = bits >> 16;
      out[length++] = (bits >> 8) & 0xff;
      out[length++] = bits & 0xff;
      bits = 0;
    }
  }
  if (count % 4 === 2) out[length++] = bits >> 4;
  if (count % 4 === 3) {
    out[length++] = bits >> 10;
    out[length++] = (bits >> 2) & 0xff;
  }
  return out.subarray(0, length);
}

// SHA-256 (FIPS 180-4), synchronous. One schedule and one block buffer for the whole module, reused by every call.
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
  0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
  0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
  0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
  0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
  0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const H0 = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
const H = new Uint32Array(8);
const W = new Uint32Array(64);
const BLOCK = new Uint8Array(64);

/** Folds the 64-byte block at bytes[at] into H. */
function compress(bytes, at) {
  for (let i = 0; i < 16; i++, at += 4) W[i] = (bytes[at] << 24) | (bytes[at + 1] << 16) | (bytes[at + 2] << 8) | bytes[at + 3];
  for (let i = 16; i < 64; i++) {
    const x = W[i - 15];
    const y = W[i - 2];
    const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
    const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
    W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
  }
  let a = H[0];
  let b = H[1];
  let c = H[2];
  let d = H[3];
  let e = H[4];
  let f = H[5];
  let g = H[6];
  let h = H[7];
  for (let i = 0; i < 64; i++) {
    const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
    const t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
    const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
    const t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  H[0] += a;
  H[1] += b;
  H[2] += c;
  H[3] += d;
  H[4] += e;
  H[5] += f;
  H[6] += g;
  H[7] += h;
}

/** SHA-256 of the parts (Uint8Array, or strings as UTF-8) one after the other. */
function sha256(...parts) {
  H.set(H0);
  let filled = 0;
  let total = 0;
  for (const part of parts) {
    const bytes = typeof part === 'string' ? utf8(part) : part;
    total += bytes.length;
    let at = 0;
    if (filled > 0) {
      at = Math.min(64 - filled, bytes.length);
      BLOCK.set(bytes.subarray(0, at), filled);
      filled += at;
      if (filled < 64) continue;
      compress(BLOCK, 0);
      filled = 0;
    }
    for (; at + 64 <= bytes.length; at += 64) compress(bytes, at);
    BLOCK.set(bytes.subarray(at), 0);
    filled = bytes.length - at;
  }
  BLOCK[filled++] = 0x80;
  if (filled > 56) {
    BLOCK.fill(0, filled);
    compress(BLOCK, 0);
    filled = 0;
  }
  BLOCK.fill(0, filled, 56);
  const bits = total * 8;
  const high = Math.floor(bits / 0x100000000);
  BLOCK.set(
    [
      high >>> 24,
      (high >>> 16) & 0xff,
      (high >>> 8) & 0xff,
      high & 0xff,
      bits >>> 24,
      (bits >>> 16) & 0xff,
      (bits >>> 8) & 0xff,
      bits & 0xff,
    ],
    56,
  );
  compress(BLOCK, 0);
  const digest = new Uint8Array(32);
  for (let i = 0; i < 8; i++) {
    digest[i * 4] = H[i] >>> 24;
    digest[i * 4 + 1] = H[i] >>> 16;
    digest[i * 4 + 2] = H[i] >>> 8;
    digest[i * 4 + 3] = H[i];
  }
  return digest;
}

const LEAF_PREFIX = Uint8Array.of(0);
const NODE_PREFIX = Uint8Array.of(1);
const leafHash = (entry) => sha256(LEAF_PREFIX, entry);
const nodeHash = (l, r) => sha256(NODE_PREFIX, l, r);
const EMPTY_ROOT = sha256();

/** RFC 9162 §2.1.3.2. */
export function verifyInclusion(leaf, index, size, proof, root) {
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(size) || index < 0 || index >= size) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (p.length !== 32 || sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else r = nodeHash(r, p);
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equal(r, root);
}

/** RFC 9162 §2.1.4.2. */
export function verifyConsistency(m, n, firstRoot, secondRoot, proof) {
  if (!Number.isSafeInteger(m) || !Number.isSafeInteger(n) || m < 0 || m > n) return false;
  if (m === n) return proof.length === 0 && equal(firstRoot, secondRoot);
  if (m === 0) return proof.length === 0 && equal(firstRoot, EMPTY_ROOT);
  if (!proof.length || proof.some((p) => p.length !== 32)) return false;
  const path = (m & (m - 1)) === 0 ? [firstRoot, ...proof] : proof;
  let fn = m - 1;
  let sn = n - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr = path[0];
  let sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      while (fn % 2 === 0 && fn !== 0) {
        fn = Math.floor(fn / 2);
        sn = Math.floor(sn / 2);
      }
    } else sr = nodeHash(sr, c);
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && equal(fr, firstRoot) && equal(sr, secondRoot);
}

/** Tree heads of every prefix size asked for, from the leaves in one pass (a stack of complete subtrees). */
function rootsAt(leaves, sizes) {
  const wanted = new Set(sizes);
  const roots = new Map();
  const stack = []; // [hash, count] of complete subtrees, left to right
  if (wanted.has(0)) roots.set(0, EMPTY_ROOT);
  leaves.forEach((leaf, i) => {
    let node = [leaf, 1];
    while (stack.length && stack[stack.length - 1][1] === node[1]) {
      const left = stack.pop();
      node = [nodeHash(left[0], node[0]), left[1] * 2];
    }
    stack.push(node);
    if (wanted.has(i + 1)) {
      let root = stack[stack.length - 1][0];
      for (let j = stack.length - 2; j >= 0; j--) root = nodeHash(stack[j][0], root);
      roots.set(i + 1, root);
    }
  });
  return roots;
}

/** RFC 8785 canonical JSON of a parsed entry (keys sorted by UTF-16 code units, no whitespace). */
function canonicalJson(value) {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const keys = Object.keys(value).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(',')}}`;
}

const ECDSA_P256 = { name: 'ECDSA', namedCurve: 'P-256' };

/** A P-256 public key from PEM (SPKI) and its key ID: the first 4 bytes of SHA-256 of its DER, in hex. */
async function importKey(pem) {
  try {
    const body = /-----BEGIN PUBLIC KEY-----([^-]*)-----END PUBLIC KEY-----/.exec(pem)[1];
    const key = await crypto.subtle.importKey('spki', fromBase64(body), ECDSA_P256, true, ['verify']);
    // The ID is of the DER as exported again (as the daemon computes it), not of whatever the file holds.
    return { key, id: toHex(sha256(new Uint8Array(await crypto.subtle.exportKey('spki', key))).subarray(0, 4)) };
  } catch {
    // Not PEM, not SPKI, another algorithm or another curve: WebCrypto does not say which.
    throw new Failure('a public key is not an ECDSA P-256 key');
  }
}

/**
 * A DER ECDSA signature (SEQUENCE of INTEGER r, INTEGER s) as IEEE P1363 (r‖s, 32 bytes each), which WebCrypto
 * takes; null unless it is strict DER, which is all OpenSSL accepts (no long lengths, no padding, no negatives).
 */
function derToP1363(der) {
  if (der.length < 8 || der.length > 72 || der[0] !== 0x30 || der[1] !== der.length - 2) return null;
  const out = new Uint8Array(64);
  let at = 2;
  for (const end of [32, 64]) {
    const length = der[at + 1];
    if (der[at] !== 0x02 || length === 0 || length > 33 || at + 2 + length > der.length) return null;
    let int = der.subarray(at + 2, at + 2 + length);
    if (int[0] & 0x80 || (length > 1 && int[0] === 0 && !(int[1] & 0x80))) return null;
    // 33 bytes only for a leading zero before a high bit; anything else is not a P-256 scalar.
    if (length === 33) {
      if (int[0] !== 0) return null;
      int = int.subarray(1);
    }
    out.set(int, end - int.length);
    at += 2 + length;
  }
  return at === der.length ? out : null;
}

/** Whether `der` is key's ECDSA signature of SHA-256(data); a malformed signature does not verify. */
async function verifySignature(data, key, der) {
  const signature = derToP1363(der);
  return signature !== null && crypto.subtle.verify({ name: 'ECDSA', hash: 'SHA-256' }, key, signature, data);
}

/** Parses and checks one signed note against the trusted keys (by key ID); returns its size, root and signer. */
async function checkNote(checkpoint, trusted, origin) {
  const note = checkpoint.note;
  const split = note.indexOf('\n\n');
  if (split < 0) throw new Failure(`checkpoint ${checkpoint.seq}: not a signed note (no blank line)`);
  const text = note.slice(0, split + 1);
  const lines = text.split('\n').slice(0, -1);
  const [noteOrigin, sizeLine, rootLine, ...extensions] = lines;
  if (noteOrigin !== origin) throw new Failure(`checkpoint ${checkpoint.seq}: origin '${noteOrigin}' is not '${origin}'`);
  if (!/^(0|[1-9][0-9]*)$/.test(sizeLine ?? '')) throw new Failure(`checkpoint ${checkpoint.seq}: bad size line`);
  const size = Number(sizeLine);
  const root = fromBase64(rootLine ?? '');
  if (root.length !== 32 || toBase64(root) !== rootLine) throw new Failure(`checkpoint ${checkpoint.seq}: bad root line`);
  if (checkpoint.size !== undefined && checkpoint.size !== size)
    throw new Failure(`checkpoint ${checkpoint.seq}: size ${checkpoint.size} does not match its signed text (${size})`);
  if (checkpoint.root !== undefined && checkpoint.root !== rootLine)
    throw new Failure(`checkpoint ${checkpoint.seq}: root does not match its signed text`);
  const signer = extensions.find((l) => l.startsWith('signer '))?.slice(7) ?? 'unknown';
  const time = extensions.find((l) => l.startsWith('time '))?.slice(5) ?? null;
  let verified = null;
  for (const line of note
    .slice(split + 2)
    .split('\n')
    .filter(Boolean)) {
    const match = /^\u2014 (\S+) ([A-Za-z0-9+/=]+)$/.exec(line);
    if (!match) throw new Failure(`checkpoint ${checkpoint.seq}: malformed signature line`);
    const blob = fromBase64(match[2]);
    const key = trusted.get(toHex(blob.subarray(0, 4)));
    if (match[1] !== origin || !key) continue; // another key's signature
    if (!(await verifySignature(utf8(text), key, blob.subarray(4)))) {
      throw new Failure(`checkpoint ${checkpoint.seq}: the signature does not verify with the public key ${toHex(blob.subarray(0, 4))}`);
    }
    verified = toHex(blob.subarray(0, 4));
  }
  if (!verified)
    throw new Failure(`checkpoint ${checkpoint.seq}: no signature by a trusted key (trusted: ${[...trusted.keys()].join(', ')})`);
  return { seq: checkpoint.seq, size, root, signer, time, keyId: verified };
}

/** A big-endian unsigned integer; past the end it throws the error Node's Buffer threw, so messages stay the same. */
function readUint(bytes, at, size) {
  if (at + size > bytes.length)
    throw new RangeError(`The value of "offset" is out of range. It must be >= 0 and <= ${bytes.length - size}. Received ${at}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return size === 8 ? view.getBigUint64(at) : size === 4 ? view.getUint32(at) : view.getUint16(at);
}

/** The TPM clock in a quote (TPMS_ATTEST, TPM 2.0 Part 2 §10.12) after checking it quotes this note's text. */
async function checkQuote(checkpoint, akKey) {
  const what = `checkpoint ${checkpoint.seq}`;
  const quote = checkpoint.quote;
  if (!quote) throw new Failure(`${what}: no TPM quote (not bound to the TPM's clock)`);
  const attest = fromBase64(quote.attest);
  if (!(akKey && (await verifySignature(attest, akKey, fromBase64(quote.signature))))) {
    throw new Failure(`${what}: the TPM quote's signature does not verify with the attestation key`);
  }
  if (attest.length < 10 || readUint(attest, 0, 4) !== 0xff544347 || readUint(attest, 4, 2) !== 0x8018)
    throw new Failure(`${what}: the quote is not a TPM quote`);
  let at = 6;
  at += 2 + readUint(attest, at, 2);
  const extraSize = readUint(attest, at, 2);
  const extra = attest.subarray(at + 2, at + 2 + extraSize);
  at += 2 + extraSize;
  const text = checkpoint.note.slice(0, checkpoint.note.indexOf('\n\n') + 1);
  if (!equal(extra, sha256(text)))
    throw new Failure(`${what}: the TPM quote is for another text (its qualifying data is not this checkpoint's digest)`);
  return { clock: readUint(attest, at, 8), resetCount: readUint(attest, at + 8, 4), restartCount: readUint(attest, at + 12, 4) };
}

const hashes = (list, what) => {
  if (!Array.isArray(list)) throw new Failure(`${what}: missing proof`);
  return list.map((h) => {
    const b = fromBase64(h);
    if (b.length !== 32) throw new Failure(`${what}: a proof hash is not 32 bytes`);
    return b;
  });
};

const CUT_OFF = 'stream cut off';

/**
 * Every stream's start entry (kind `stream.start`) that no end entry names (`stream_start` in a call entry), as lines
 * to report. Entries of any kind, or not JSON at all, are passed over: only the hashes decide whether the log holds.
 */
function unendedStreams(entries) {
  const decoder = new TextDecoder();
  const starts = new Map();
  const ended = new Set();
  for (let leaf = 0; leaf < entries.length; leaf++) {
    const text = decoder.decode(entries[leaf]);
    // Both fields start so; most entries need no parse.
    if (!text.includes('"stream')) continue;
    let entry;
    try {
      entry = JSON.parse(text);
    } catch {
      continue;
    }
    if (entry === null || typeof entry !== 'object') continue;
    if (entry.kind === 'stream.start') starts.set(leaf, entry);
    else if (Number.isSafeInteger(entry.stream_start)) ended.add(entry.stream_start);
  }
  const lines = [];
  for (const [leaf, entry] of starts) {
    if (!ended.has(leaf)) lines.push(`${CUT_OFF}: leaf ${leaf} (${entry.request_id}), started ${entry.time}, no end entry`);
  }
  return { starts: starts.size, lines };
}

/**
 * Verifies; resolves to the lines to print and the newest checkpoint (for a state file). Rejects with a Failure
 * naming the first thing that is wrong. `entries` (with an export) are the entries' bytes, one Uint8Array each.
 * @param {{ keyPem?: string, keyPems?: string[], anchors?: any, entries?: Uint8Array[], receipt?: any, state?: any,
 *   requireTpm?: boolean, akPem?: string }} input
 * @returns {Promise<{ lines: string[], latest: any, origin?: string, checked?: any[], leaves?: Uint8Array[] | null }>}
 */
export async function verify({ keyPem, keyPems, anchors, entries, receipt, state, requireTpm, akPem }) {
  const out = [];
  // Every key the operator trusts (more than one after a key was replaced), by key ID.
  const trusted = new Map();
  for (const pem of keyPems ?? [keyPem]) {
    const { key, id } = await importKey(pem);
    trusted.set(id, key);
  }
  const keyId = [...trusted.keys()][0];
  const doc = receipt ?? anchors;
  const origin = doc.origin;
  if (typeof origin !== 'string' || !origin) throw new Failure('the JSON names no origin');
  if (doc.key_id && !trusted.has(doc.key_id))
    throw new Failure(
      `the log is signed now by key ${doc.key_id}, which is not among the trusted keys (${[...trusted.keys()].join(', ')})`,
    );
  out.push(`log ${origin}, trusted key${trusted.size > 1 ? 's' : ''} ${[...trusted.keys()].join(', ')}`);
  const noteCheck = async (c) => {
    const checked = await checkNote(c, trusted, origin);
    if (checked.signer !== 'tpm') {
      if (requireTpm) throw new Failure(`checkpoint ${c.seq} was signed by a ${checked.signer} key, not the TPM`);
    }
    return checked;
  };

  // The attestation key's type was never checked: one that is not P-256 (null here) verifies no quote.
  const akKey = akPem
    ? await importKey(akPem).then(
        ({ key }) => key,
        () => null,
      )
    : undefined;
  if (receipt) {
    const c = await noteCheck(receipt.checkpoint);
    if (akKey !== undefined) await checkQuote(receipt.checkpoint, akKey);
    if (!Number.isSafeInteger(receipt.leaf) || receipt.leaf < 0) throw new Failure('the receipt names no valid leaf');
    if (typeof receipt.entry_canonical !== 'string') throw new Failure('the receipt has no entry_canonical');
    // What a reader sees (entry) must be exactly what was hashed (entry_canonical).
    if (receipt.entry !== undefined && canonicalJson(receipt.entry) !== receipt.entry_canonical) {
      throw new Failure(`entry ${receipt.leaf}: the entry shown differs from the bytes that were logged`);
    }
    const entryBytes = utf8(receipt.entry_canonical);
    const proof = hashes(receipt.inclusion, `entry ${receipt.leaf}`);
    if (!verifyInclusion(leafHash(entryBytes), receipt.leaf, c.size, proof, c.root)) {
      throw new Failure(`entry ${receipt.leaf}: its inclusion proof does not lead to checkpoint ${c.seq}'s root`);
    }
    out.push(`checkpoint ${c.seq} (size ${c.size}, signed by ${c.signer}): signature ok`);
    out.push(`entry ${receipt.leaf}: included in checkpoint ${c.seq}: ${receipt.entry_canonical}`);
    return { lines: out, latest: null };
  }

  const list = [...(anchors.checkpoints ?? [])].sort((a, b) => a.seq - b.seq);
  if (!list.length) throw new Failure('no checkpoints to verify');
  // One at a time, in order, so the failure named is the first one.
  const checked = [];
  for (const c of list) checked.push(await noteCheck(c));
  const software = checked.filter((c) => c.signer !== 'tpm').length;
  out.push(`${checked.length} checkpoint signatures ok${software ? ` (${software} signed by a software key, not a TPM)` : ''}`);
  for (let i = 1; i < checked.length; i++) {
    const [a, b] = [checked[i - 1], checked[i]];
    if (b.size < a.size)
      throw new Failure(`checkpoint ${b.seq} has size ${b.size}, smaller than checkpoint ${a.seq}'s ${a.size}: the log went back`);
    const consistency = list[i].consistency;
    if (!consistency || consistency.from_seq !== a.seq)
      throw new Failure(`checkpoint ${b.seq}: no consistency proof from checkpoint ${a.seq}`);
    if (!verifyConsistency(a.size, b.size, a.root, b.root, hashes(consistency.proof, `checkpoint ${b.seq}`))) {
      throw new Failure(
        `checkpoint ${b.seq}: the consistency proof from checkpoint ${a.seq} (size ${a.size} → ${b.size}) does not verify: the log was rewritten`,
      );
    }
  }
  out.push(`${checked.length - 1} consistency proofs ok; sizes never go back (${checked[0].size} → ${checked.at(-1).size})`);

  if (akKey !== undefined) {
    let previous;
    for (const c of list) {
      const clock = await checkQuote(c, akKey);
      if (previous && clock.resetCount < previous.resetCount)
        throw new Failure(`checkpoint ${c.seq}: the TPM's reset count went back (${previous.resetCount} → ${clock.resetCount})`);
      if (previous && clock.resetCount === previous.resetCount && clock.clock < previous.clock) {
        throw new Failure(`checkpoint ${c.seq}: the TPM's clock went back without a reset (${previous.clock} → ${clock.clock} ms)`);
      }
      previous = clock;
    }
    out.push(`${list.length} TPM quotes ok: each checkpoint bound to the TPM's clock, which never goes back without a reset`);
  }

  // Hashed once: the roots of every checkpoint, a state file's, and a cluster's other checkpoints are all made of them.
  const leaves = entries ? entries.map(leafHash) : null;
  if (entries) {
    const last = checked.at(-1);
    if (entries.length < last.size)
      throw new Failure(`the export has ${entries.length} entries, but checkpoint ${last.seq} covers ${last.size}: entries are missing`);
    const roots = rootsAt(
      leaves,
      checked.map((c) => c.size),
    );
    for (const c of checked) {
      if (!equal(roots.get(c.size), c.root))
        throw new Failure(`the entries do not hash to checkpoint ${c.seq}'s root (size ${c.size}): an entry was changed, removed or added`);
    }
    out.push(`${last.size} entries: every checkpoint's root recomputed from them; all are included, none changed, removed or added`);
    if (entries.length > last.size) {
      out.push(
        `NOT VERIFIED: the ${entries.length - last.size} entries after checkpoint ${last.seq} are not covered by a signed checkpoint yet`,
      );
    }
    const streams = unendedStreams(entries);
    if (streams.starts) {
      out.push(`${streams.starts} streams started; ${streams.starts - streams.lines.length} of them have their end entry`);
      out.push(...streams.lines);
    }
  }

  const latest = checked.at(-1);
  if (state) {
    if (state.origin !== origin || !trusted.has(state.key_id))
      throw new Failure(`the state file is for ${state.origin} (key ${state.key_id}), not this log`);
    const trustedRoot = fromBase64(state.root);
    if (latest.size < state.size)
      throw new Failure(
        `rolled back: the newest checkpoint has size ${latest.size}, but checkpoint ${state.seq} (size ${state.size}) was trusted before`,
      );
    const same = checked.find((c) => c.size === state.size);
    const linked = same
      ? equal(same.root, trustedRoot)
      : entries
        ? equal(rootsAt(leaves, [state.size]).get(state.size), trustedRoot)
        : null;
    if (linked === null)
      throw new Failure(
        `cannot link to the trusted checkpoint (size ${state.size}): give an export with entries, or an older page of checkpoints`,
      );
    if (!linked)
      throw new Failure(
        `forked: the log's tree at size ${state.size} is not the one trusted before (checkpoint ${state.seq}); it was rewritten or truncated and regrown`,
      );
    out.push(`extends the checkpoint trusted before (size ${state.size})`);
  }
  return {
    lines: out,
    latest: {
      origin,
      key_id: list.at(-1).key_id ?? keyId,
      seq: latest.seq,
      size: latest.size,
      root: toBase64(latest.root),
    },
    // For a cluster's checks (verifyCluster): the log's name, its checkpoints as checked, and its entries' leaf hashes.
    origin,
    checked,
    leaves,
  };
}

/** A log's silence bound from its published record (daemon/audit/anchors.ts, silentAfterMs): two missed heartbeats. */
const silentAfter = (log) => 2 * (log.heartbeat_ms + log.checkpoint_ms);
/** For a log no published record gives a bound for: the daemon's defaults (heartbeat 5 min, checkpoints every 1 s). */
export const DEFAULT_SILENT_AFTER_MS = silentAfter({ heartbeat_ms: 300_000, checkpoint_ms: 1_000 });
const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;
/** Lines that report rather than pass a check (printed without "ok: "). */
const isReport = (line) => line.startsWith('NOT VERIFIED') || line.startsWith(CUT_OFF);

/**
 * Verifies a cluster's logs (store: "postgres": one log per replica, each under its own origin and key). Each source
 * is an export (anchors and entries) or the JSON of GET /v1/audit/anchors, and may carry every replica's newest
 * checkpoint as it was published (`logs`: an export's logs.json, the endpoint's `logs`). Each log is verified on its
 * own, as `verify` does; then across the set:
 *   - each key signs one log only (a key that signs two origins lets one replica speak for another),
 *   - no two checkpoints of one origin disagree: the same size with another root, or a checkpoint that is not the tree
 *     of that log's exported entries; either is a fork (the replica showed different logs to different readers),
 *   - no log is silent: its newest checkpoint is older than the newest of the whole set by more than its bound (two
 *     heartbeats of its own, as its published record says; or `silentAfterMs`).
 * It does not stop at the first problem: it resolves to the lines to print and every failure, fork and silent log.
 * @param {{ keyPems: string[], sources: Array<{ name: string, anchors: any, entries?: Uint8Array[], logs?: any[] }>,
 *   requireTpm?: boolean, silentAfterMs?: number }} input
 * @returns {Promise<{ lines: string[], failures: string[], forks: string[], silent: string[], notChecked: string[] }>}
 */
export async function verifyCluster({ keyPems, sources, requireTpm, silentAfterMs }) {
  const trusted = new Map();
  for (const pem of keyPems) {
    const { key, id } = await importKey(pem);
    trusted.set(id, key);
  }
  const lines = [];
  const failures = [];
  const forks = [];
  const silent = [];
  const notChecked = [];
  // origin → every checkpoint of it found (each signed note once), the leaf hashes of its longest export, the
  // sources that hold its own anchors, and the silence bounds its published records give.
  const logs = new Map();
  const logOf = (origin) => {
    if (!logs.has(origin)) logs.set(origin, { checkpoints: new Map(), leaves: null, leavesFrom: null, own: [], bounds: [] });
    return logs.get(origin);
  };
  const add = (log, c, note, where) => {
    if (!log.checkpoints.has(note)) log.checkpoints.set(note, { ...c, where });
  };

  for (const source of sources) {
    const { name, anchors } = source;
    if (Array.isArray(anchors?.checkpoints)) {
      const title = `log ${anchors.origin} (${name})`;
      try {
        const result = await verify({ keyPems, anchors, entries: source.entries, requireTpm });
        lines.push(`${title}:`, ...result.lines.map((line) => (isReport(line) ? line : `ok: ${line}`)));
        const log = logOf(result.origin);
        log.own.push(name);
        for (const c of anchors.checkpoints) {
          const checked = result.checked.find((k) => k.seq === c.seq);
          if (checked) add(log, checked, c.note, name);
        }
        if (result.leaves && (!log.leaves || result.leaves.length > log.leaves.length)) {
          log.leaves = result.leaves;
          log.leavesFrom = name;
        }
      } catch (err) {
        if (!(err instanceof Failure)) throw err;
        failures.push(`${title}: ${err.message}`);
      }
    }
    const published = [...(Array.isArray(anchors?.logs) ? anchors.logs : []), ...(source.logs ?? [])];
    for (const record of published) {
      const origin = record?.origin;
      const where = `as published, in ${name}`;
      try {
        if (typeof origin !== 'string' || !origin || typeof record.checkpoint?.note !== 'string')
          throw new Failure('a published log names no origin or has no checkpoint');
        const c = await checkNote(record.checkpoint, trusted, origin);
        if (requireTpm && c.signer !== 'tpm') throw new Failure(`checkpoint ${c.seq} was signed by a ${c.signer} key, not the TPM`);
        const log = logOf(origin);
        add(log, c, record.checkpoint.note, where);
        if (Number.isSafeInteger(record.heartbeat_ms) && Number.isSafeInteger(record.checkpoint_ms)) log.bounds.push(silentAfter(record));
      } catch (err) {
        if (!(err instanceof Failure)) throw err;
        failures.push(`log ${origin ?? '(no origin)'} (${where}): ${err.message}`);
      }
    }
  }
  lines.push(`cluster: ${logs.size} log${logs.size === 1 ? '' : 's'}: ${[...logs.keys()].join(', ')}`);

  // One key, one log.
  const originsByKey = new Map();
  for (const [origin, log] of logs) {
    for (const c of log.checkpoints.values()) originsByKey.set(c.keyId, (originsByKey.get(c.keyId) ?? new Set()).add(origin));
  }
  for (const [keyId, origins] of originsByKey) {
    if (origins.size > 1) {
      failures.push(
        `key ${keyId} signs the checkpoints of ${origins.size} logs (${[...origins].join(', ')}): each replica must sign its own log with a key of its own`,
      );
    }
  }
  if ([...originsByKey.values()].every((o) => o.size === 1)) lines.push(`ok: each of the ${originsByKey.size} keys signs one log`);

  // No two checkpoints of one origin disagree.
  let newestOfAll = -Infinity;
  for (const [origin, log] of logs) {
    const all = [...log.checkpoints.values()];
    const forksBefore = forks.length;
    const bySize = new Map();
    for (const c of all) {
      const seen = bySize.get(c.size);
      if (!seen) bySize.set(c.size, c);
      else if (!equal(seen.root, c.root)) {
        forks.push(
          `log ${origin}: two signed checkpoints of size ${c.size} with different roots (checkpoint ${seen.seq}, ${seen.where}; checkpoint ${c.seq}, ${c.where}): the log forked`,
        );
      }
    }
    let matched = 0;
    if (log.leaves) {
      const within = all.filter((c) => c.size <= log.leaves.length);
      const roots = rootsAt(
        log.leaves,
        within.map((c) => c.size),
      );
      for (const c of within) {
        if (equal(roots.get(c.size), c.root)) matched++;
        else {
          forks.push(
            `log ${origin}: checkpoint ${c.seq} (size ${c.size}, ${c.where}) is not the tree of the log's entries (${log.leavesFrom}): the log forked`,
          );
        }
      }
      for (const c of all.filter((c) => c.size > log.leaves.length)) {
        notChecked.push(
          `log ${origin}: checkpoint ${c.seq} (size ${c.size}, ${c.where}) is newer than its export (${log.leaves.length} entries, ${log.leavesFrom}); export the log again to check it`,
        );
      }
    } else {
      const ownSizes = new Set(all.filter((c) => log.own.includes(c.where)).map((c) => c.size));
      for (const c of all) {
        if (ownSizes.has(c.size)) matched++;
        else {
          notChecked.push(
            `log ${origin}: checkpoint ${c.seq} (size ${c.size}, ${c.where}) was compared with nothing: no export of this log has its entries, and none of its anchors has its size`,
          );
        }
      }
    }
    if (!log.own.length)
      notChecked.push(`log ${origin}: no export or anchors of this log were given; only its published checkpoints' signatures are checked`);
    if (forks.length === forksBefore && matched > 0) {
      lines.push(
        `ok: log ${origin}: ${matched} checkpoint${matched === 1 ? '' : 's'} from ${new Set(all.map((c) => c.where)).size} source(s) agree${log.leaves ? ' with its entries' : ''}`,
      );
    }
    log.newest = Math.max(...all.map((c) => Date.parse(c.time ?? '')).filter(Number.isFinite));
    if (log.newest > newestOfAll) newestOfAll = log.newest;
  }

  // No log silent.
  for (const [origin, log] of logs) {
    if (!Number.isFinite(log.newest)) continue;
    const bound = silentAfterMs ?? (log.bounds.length ? Math.max(...log.bounds) : DEFAULT_SILENT_AFTER_MS);
    const gap = newestOfAll - log.newest;
    if (gap > bound) {
      silent.push(
        `log ${origin}: its newest checkpoint (signed ${new Date(log.newest).toISOString()}) is ${seconds(gap)} older than the newest in the set, more than its bound of ${seconds(bound)}: the replica went silent (stopped, cut off, or no longer publishing)`,
      );
    }
  }
  if (!silent.length && logs.size)
    lines.push(`ok: no log is silent (newest checkpoint of the set signed ${new Date(newestOfAll).toISOString()})`);
  return { lines, failures, forks, silent, notChecked };
}

/** The command line (Node only: its modules are imported here, so a browser importing this file never loads them). */
async function main() {
  const { existsSync, readFileSync, renameSync, writeFileSync } = await import('node:fs');
  const { join } = await import('node:path');
  const { parseArgs } = await import('node:util');
  const readExport = (dir) => {
    const anchors = JSON.parse(readFileSync(join(dir, 'anchors.json'), 'utf8'));
    const text = readFileSync(join(dir, 'entries.jsonl'), 'utf8');
    const entries =
      text === ''
        ? []
        : text
            .replace(/\n$/, '')
            .split('\n')
            .map((l) => encoder.encode(l));
    // A cluster's export also holds every replica's newest checkpoint as published (logs.json).
    const logsFile = join(dir, 'logs.json');
    const logs = existsSync(logsFile) ? JSON.parse(readFileSync(logsFile, 'utf8')).logs : undefined;
    return { anchors, entries, logs: Array.isArray(logs) ? logs : undefined };
  };
  let args;
  try {
    args = parseArgs({
      options: {
        key: { type: 'string', multiple: true },
        export: { type: 'string', multiple: true },
        anchors: { type: 'string', multiple: true },
        receipt: { type: 'string' },
        state: { type: 'string' },
        'require-tpm': { type: 'boolean' },
        ak: { type: 'string' },
        cluster: { type: 'boolean' },
        'silent-after': { type: 'string' },
        'silent-ok': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    return 2;
  }
  const exports = args.export ?? [];
  const anchorFiles = args.anchors ?? [];
  const count = exports.length + anchorFiles.length + (args.receipt ? 1 : 0);
  const cluster = args.cluster === true || count > 1;
  const silentAfter = args['silent-after'];
  const usage =
    args.help ||
    !args.key ||
    count === 0 ||
    (!cluster && count !== 1) ||
    (cluster && (args.receipt || args.state || args.ak)) ||
    (silentAfter !== undefined && !/^[1-9][0-9]{0,12}$/.test(silentAfter));
  if (usage) {
    process.stdout.write(
      'Usage: node verify-anchors.mjs --key PUBLIC.pem (--export DIR | --anchors FILE.json | --receipt FILE.json) [--state FILE] [--require-tpm] [--ak ATTESTATION.pem]\n' +
        '       node verify-anchors.mjs --key A.pem --key B.pem ... --export DIR_A --export DIR_B ... [--anchors FILE.json ...] [--cluster] [--require-tpm] [--silent-after MS] [--silent-ok]\n' +
        '       (a cluster: every log checked with its own key; exit 1 on a failure or a fork, 3 when a log went silent)\n',
    );
    return args.help ? 0 : 2;
  }
  if (cluster) return await mainCluster(args, { readFileSync, readExport });
  try {
    const keyPems = args.key.map((file) => readFileSync(file, 'utf8'));
    const input = exports.length
      ? readExport(exports[0])
      : anchorFiles.length
        ? { anchors: JSON.parse(readFileSync(anchorFiles[0], 'utf8')) }
        : { receipt: JSON.parse(readFileSync(args.receipt, 'utf8')) };
    const others = input.logs ?? input.anchors?.logs;
    delete input.logs;
    const state = args.state && existsSync(args.state) ? JSON.parse(readFileSync(args.state, 'utf8')) : undefined;
    const akPem = args.ak ? readFileSync(args.ak, 'utf8') : undefined;
    const { lines, latest } = await verify({ keyPems, ...input, state, requireTpm: args['require-tpm'] === true, akPem });
    for (const line of lines) process.stdout.write(isReport(line) ? `${line}\n` : `ok: ${line}\n`);
    if (Array.isArray(others) && others.length) {
      process.stdout.write(
        `NOT VERIFIED: the ${others.length} replicas' published checkpoints beside this log; check the cluster with --cluster and every replica's key and export\n`,
      );
    }
    if (args.state && latest) {
      writeFileSync(`${args.state}.tmp`, `${JSON.stringify(latest, null, 2)}\n`);
      renameSync(`${args.state}.tmp`, args.state);
      process.stdout.write(`trusted now: checkpoint ${latest.seq} (size ${latest.size}), recorded in ${args.state}\n`);
    }
    process.stdout.write('VERIFIED\n');
    return 0;
  } catch (err) {
    process.stdout.write(`FAILED: ${err instanceof Failure ? err.message : `could not verify: ${err.message}`}\n`);
    return 1;
  }
}

/** A cluster's logs, from several exports and anchors files: exit 0 verified, 1 a failure or a fork, 3 a log silent. */
async function mainCluster(args, { readFileSync, readExport }) {
  try {
    const keyPems = args.key.map((file) => readFileSync(file, 'utf8'));
    const sources = [
      ...(args.export ?? []).map((dir) => ({ name: `export ${dir}`, ...readExport(dir) })),
      ...(args.anchors ?? []).map((file) => ({ name: `anchors ${file}`, anchors: JSON.parse(readFileSync(file, 'utf8')) })),
    ];
    const silentAfterMs = args['silent-after'] === undefined ? undefined : Number(args['silent-after']);
    const result = await verifyCluster({ keyPems, sources, requireTpm: args['require-tpm'] === true, silentAfterMs });
    const out = (line) => process.stdout.write(`${line}\n`);
    result.lines.forEach(out);
    for (const line of result.notChecked) out(`NOT CHECKED: ${line}`);
    for (const line of result.silent) out(`SILENT: ${line}`);
    for (const line of result.forks) out(`FORK: ${line}`);
    for (const line of result.failures) out(`FAILED: ${line}`);
    const { failures, forks, silent } = result;
    if (failures.length || forks.length) {
      const counts = [
        failures.length ? `${failures.length} failure${failures.length === 1 ? '' : 's'}` : '',
        forks.length ? `${forks.length} fork${forks.length === 1 ? '' : 's'}` : '',
      ];
      out(`FAILED: ${counts.filter(Boolean).join(', ')}`);
      return 1;
    }
    if (silent.length) {
      out(`VERIFIED, but ${silent.length} log${silent.length === 1 ? '' : 's'} silent`);
      return args['silent-ok'] ? 0 : 3;
    }
    out('VERIFIED');
    return 0;
  } catch (err) {
    process.stdout.write(`FAILED: ${err instanceof Failure ? err.message : `could not verify: ${err.message}`}\n`);
    return 1;
  }
}

// Run as a program when Node executes this file; imported (by a test, or in a browser, where there is no process),
// do nothing. No top-level await, so bundlers need not support it.
if (typeof process !== 'undefined' && process.argv?.[1] && import.meta.url.startsWith('file:')) {
  import('node:url').then(async ({ fileURLToPath }) => {
    if (fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = await main();
  });
}
