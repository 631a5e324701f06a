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
// It prints what it checked, names the first failure, and exits 1 on any failure, 2 on wrong usage.
//
//   node verify-anchors.mjs --key public-key.pem --export DIR [--state FILE] [--require-tpm] [--ak FILE]
//   node verify-anchors.mjs --key public-key.pem --anchors anchors.json [--state FILE] [--require-tpm] [--ak FILE]
//   node verify-anchors.mjs --key public-key.pem --receipt receipt.json [--require-tpm] [--ak FILE]
import { createHash, createPublicKey, verify as verifySignature } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

class Failure extends Error {}

const sha256 = (...parts) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};
const leafHash = (entry) => sha256(Buffer.of(0), entry);
const nodeHash = (l, r) => sha256(Buffer.of(1), l, r);
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
  return sn === 0 && r.equals(root);
}

/** RFC 9162 §2.1.4.2. */
export function verifyConsistency(m, n, firstRoot, secondRoot, proof) {
  if (!Number.isSafeInteger(m) || !Number.isSafeInteger(n) || m < 0 || m > n) return false;
  if (m === n) return proof.length === 0 && firstRoot.equals(secondRoot);
  if (m === 0) return proof.length === 0 && firstRoot.equals(EMPTY_ROOT);
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
  return sn === 0 && fr.equals(firstRoot) && sr.equals(secondRoot);
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

/** Parses and checks one signed note against the trusted keys (by key ID); returns its size, root and signer. */
function checkNote(checkpoint, trusted, origin) {
  const note = checkpoint.note;
  const split = note.indexOf('\n\n');
  if (split < 0) throw new Failure(`checkpoint ${checkpoint.seq}: not a signed note (no blank line)`);
  const text = note.slice(0, split + 1);
  const lines = text.split('\n').slice(0, -1);
  const [noteOrigin, sizeLine, rootLine, ...extensions] = lines;
  if (noteOrigin !== origin) throw new Failure(`checkpoint ${checkpoint.seq}: origin '${noteOrigin}' is not '${origin}'`);
  if (!/^(0|[1-9][0-9]*)$/.test(sizeLine ?? '')) throw new Failure(`checkpoint ${checkpoint.seq}: bad size line`);
  const size = Number(sizeLine);
  const root = Buffer.from(rootLine ?? '', 'base64');
  if (root.length !== 32 || root.toString('base64') !== rootLine) throw new Failure(`checkpoint ${checkpoint.seq}: bad root line`);
  if (checkpoint.size !== undefined && checkpoint.size !== size)
    throw new Failure(`checkpoint ${checkpoint.seq}: size ${checkpoint.size} does not match its signed text (${size})`);
  if (checkpoint.root !== undefined && checkpoint.root !== rootLine)
    throw new Failure(`checkpoint ${checkpoint.seq}: root does not match its signed text`);
  const signer = extensions.find((l) => l.startsWith('signer '))?.slice(7) ?? 'unknown';
  const time = extensions.find((l) => l.startsWith('time '))?.slice(5) ?? null;
  let verified = false;
  for (const line of note
    .slice(split + 2)
    .split('\n')
    .filter(Boolean)) {
    const match = /^\u2014 (\S+) ([A-Za-z0-9+/=]+)$/.exec(line);
    if (!match) throw new Failure(`checkpoint ${checkpoint.seq}: malformed signature line`);
    const blob = Buffer.from(match[2], 'base64');
    const key = trusted.get(blob.subarray(0, 4).toString('hex'));
    if (match[1] !== origin || !key) continue; // another key's signature
    if (!verifySignature('sha256', Buffer.from(text), key, blob.subarray(4))) {
      throw new Failure(
        `checkpoint ${checkpoint.seq}: the signature does not verify with the public key ${blob.subarray(0, 4).toString('hex')}`,
      );
    }
    verified = true;
  }
  if (!verified)
    throw new Failure(`checkpoint ${checkpoint.seq}: no signature by a trusted key (trusted: ${[...trusted.keys()].join(', ')})`);
  return { seq: checkpoint.seq, size, root, signer, time };
}

/** The TPM clock in a quote (TPMS_ATTEST, TPM 2.0 Part 2 §10.12) after checking it quotes this note's text. */
function checkQuote(checkpoint, akKey) {
  const what = `checkpoint ${checkpoint.seq}`;
  const quote = checkpoint.quote;
  if (!quote) throw new Failure(`${what}: no TPM quote (not bound to the TPM's clock)`);
  const attest = Buffer.from(quote.attest, 'base64');
  if (!verifySignature('sha256', attest, akKey, Buffer.from(quote.signature, 'base64'))) {
    throw new Failure(`${what}: the TPM quote's signature does not verify with the attestation key`);
  }
  if (attest.length < 10 || attest.readUInt32BE(0) !== 0xff544347 || attest.readUInt16BE(4) !== 0x8018)
    throw new Failure(`${what}: the quote is not a TPM quote`);
  let at = 6;
  at += 2 + attest.readUInt16BE(at);
  const extraSize = attest.readUInt16BE(at);
  const extra = attest.subarray(at + 2, at + 2 + extraSize);
  at += 2 + extraSize;
  const text = checkpoint.note.slice(0, checkpoint.note.indexOf('\n\n') + 1);
  if (!extra.equals(sha256(text)))
    throw new Failure(`${what}: the TPM quote is for another text (its qualifying data is not this checkpoint's digest)`);
  return { clock: attest.readBigUInt64BE(at), resetCount: attest.readUInt32BE(at + 8), restartCount: attest.readUInt32BE(at + 12) };
}

const hashes = (list, what) => {
  if (!Array.isArray(list)) throw new Failure(`${what}: missing proof`);
  return list.map((h) => {
    const b = Buffer.from(h, 'base64');
    if (b.length !== 32) throw new Failure(`${what}: a proof hash is not 32 bytes`);
    return b;
  });
};

/** Verifies; returns the lines to print. Throws Failure naming the first thing that is wrong. */
export function verify({ keyPem, keyPems, anchors, entries, receipt, state, requireTpm, akPem }) {
  const out = [];
  // Every key the operator trusts (more than one after a key was replaced), by key ID.
  const trusted = new Map();
  for (const pem of keyPems ?? [keyPem]) {
    const key = createPublicKey(pem);
    if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1')
      throw new Failure('a public key is not an ECDSA P-256 key');
    trusted.set(
      sha256(key.export({ type: 'spki', format: 'der' }))
        .subarray(0, 4)
        .toString('hex'),
      key,
    );
  }
  const keyId = Buffer.from([...trusted.keys()][0], 'hex');
  const doc = receipt ?? anchors;
  const origin = doc.origin;
  if (typeof origin !== 'string' || !origin) throw new Failure('the JSON names no origin');
  if (doc.key_id && !trusted.has(doc.key_id))
    throw new Failure(
      `the log is signed now by key ${doc.key_id}, which is not among the trusted keys (${[...trusted.keys()].join(', ')})`,
    );
  out.push(`log ${origin}, trusted key${trusted.size > 1 ? 's' : ''} ${[...trusted.keys()].join(', ')}`);
  const noteCheck = (c) => {
    const checked = checkNote(c, trusted, origin);
    if (checked.signer !== 'tpm') {
      if (requireTpm) throw new Failure(`checkpoint ${c.seq} was signed by a ${checked.signer} key, not the TPM`);
    }
    return checked;
  };

  const akKey = akPem ? createPublicKey(akPem) : undefined;
  if (receipt) {
    const c = noteCheck(receipt.checkpoint);
    if (akKey) checkQuote(receipt.checkpoint, akKey);
    if (!Number.isSafeInteger(receipt.leaf) || receipt.leaf < 0) throw new Failure('the receipt names no valid leaf');
    if (typeof receipt.entry_canonical !== 'string') throw new Failure('the receipt has no entry_canonical');
    // What a reader sees (entry) must be exactly what was hashed (entry_canonical).
    if (receipt.entry !== undefined && canonicalJson(receipt.entry) !== receipt.entry_canonical) {
      throw new Failure(`entry ${receipt.leaf}: the entry shown differs from the bytes that were logged`);
    }
    const entryBytes = Buffer.from(receipt.entry_canonical, 'utf8');
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
  const checked = list.map(noteCheck);
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

  if (akKey) {
    let previous;
    for (const c of list) {
      const clock = checkQuote(c, akKey);
      if (previous && clock.resetCount < previous.resetCount)
        throw new Failure(`checkpoint ${c.seq}: the TPM's reset count went back (${previous.resetCount} → ${clock.resetCount})`);
      if (previous && clock.resetCount === previous.resetCount && clock.clock < previous.clock) {
        throw new Failure(`checkpoint ${c.seq}: the TPM's clock went back without a reset (${previous.clock} → ${clock.clock} ms)`);
      }
      previous = clock;
    }
    out.push(`${list.length} TPM quotes ok: each checkpoint bound to the TPM's clock, which never goes back without a reset`);
  }

  if (entries) {
    const last = checked.at(-1);
    if (entries.length < last.size)
      throw new Failure(`the export has ${entries.length} entries, but checkpoint ${last.seq} covers ${last.size}: entries are missing`);
    const roots = rootsAt(
      entries.map(leafHash),
      checked.map((c) => c.size),
    );
    for (const c of checked) {
      if (!roots.get(c.size).equals(c.root))
        throw new Failure(`the entries do not hash to checkpoint ${c.seq}'s root (size ${c.size}): an entry was changed, removed or added`);
    }
    out.push(`${last.size} entries: every checkpoint's root recomputed from them; all are included, none changed, removed or added`);
    if (entries.length > last.size) {
      out.push(
        `NOT VERIFIED: the ${entries.length - last.size} entries after checkpoint ${last.seq} are not covered by a signed checkpoint yet`,
      );
    }
  }

  const latest = checked.at(-1);
  if (state) {
    if (state.origin !== origin || !trusted.has(state.key_id))
      throw new Failure(`the state file is for ${state.origin} (key ${state.key_id}), not this log`);
    const trustedRoot = Buffer.from(state.root, 'base64');
    if (latest.size < state.size)
      throw new Failure(
        `rolled back: the newest checkpoint has size ${latest.size}, but checkpoint ${state.seq} (size ${state.size}) was trusted before`,
      );
    const same = checked.find((c) => c.size === state.size);
    const linked = same
      ? same.root.equals(trustedRoot)
      : entries
        ? rootsAt(entries.map(leafHash), [state.size]).get(state.size).equals(trustedRoot)
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
      key_id: list.at(-1).key_id ?? keyId.toString('hex'),
      seq: latest.seq,
      size: latest.size,
      root: latest.root.toString('base64'),
    },
  };
}

function readExport(dir) {
  const anchors = JSON.parse(readFileSync(join(dir, 'anchors.json'), 'utf8'));
  const text = readFileSync(join(dir, 'entries.jsonl'), 'utf8');
  const entries =
    text === ''
      ? []
      : text
          .replace(/\n$/, '')
          .split('\n')
          .map((l) => Buffer.from(l, 'utf8'));
  return { anchors, entries };
}

function main() {
  let args;
  try {
    args = parseArgs({
      options: {
        key: { type: 'string', multiple: true },
        export: { type: 'string' },
        anchors: { type: 'string' },
        receipt: { type: 'string' },
        state: { type: 'string' },
        'require-tpm': { type: 'boolean' },
        ak: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }).values;
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    return 2;
  }
  const sources = ['export', 'anchors', 'receipt'].filter((s) => args[s]);
  if (args.help || !args.key || sources.length !== 1) {
    process.stdout.write(
      'Usage: node verify-anchors.mjs --key PUBLIC.pem (--export DIR | --anchors FILE.json | --receipt FILE.json) [--state FILE] [--require-tpm] [--ak ATTESTATION.pem]\n',
    );
    return args.help ? 0 : 2;
  }
  try {
    const keyPems = args.key.map((file) => readFileSync(file, 'utf8'));
    const input = args.export
      ? readExport(args.export)
      : args.anchors
        ? { anchors: JSON.parse(readFileSync(args.anchors, 'utf8')) }
        : { receipt: JSON.parse(readFileSync(args.receipt, 'utf8')) };
    const state = args.state && existsSync(args.state) ? JSON.parse(readFileSync(args.state, 'utf8')) : undefined;
    const akPem = args.ak ? readFileSync(args.ak, 'utf8') : undefined;
    const { lines, latest } = verify({ keyPems, ...input, state, requireTpm: args['require-tpm'] === true, akPem });
    for (const line of lines) process.stdout.write(line.startsWith('NOT VERIFIED') ? `${line}\n` : `ok: ${line}\n`);
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

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.exitCode = main();
