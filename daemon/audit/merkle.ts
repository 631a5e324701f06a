// RFC 6962 / RFC 9162 Merkle trees: leaf and interior hashing, tree heads, inclusion and consistency proofs. Proofs
// are verified by tools/verify-anchors.mjs, the one verifier an operator runs (the tests use it too). Generation works
// over any source of complete-subtree hashes, so the log answers from the subtrees it stores (O(log n) lookups) and
// tests from a plain list of leaves.
import { createHash, hash } from 'node:crypto';

export type Hash = Buffer;

export const EMPTY_ROOT: Hash = createHash('sha256').digest();

// One-shot hashing over one buffer, cheaper than a Hash object for inputs this small. The inputs are built in
// buffers kept for it (hash() reads them before it returns), and each digest is copied into a small slab of its own
// memory: a digest returned as a Buffer is an ArrayBuffer of its own, which V8 sweeps one by one at its next young
// collection (at times inside the pause), and every append makes a leaf's digest and most make a subtree's. A slab
// MUST NOT be reused, so a hash handed out never changes; one kept for long (the tree's right edge, or a digest lmdb
// still holds) keeps its one slab (SLAB_BYTES) alive, no more.
const LEAF_PREFIX = Buffer.of(0);
const SLAB_BYTES = 1024;
const LEAF_INPUT_BYTES = 4096;
const leafInput = Buffer.alloc(LEAF_INPUT_BYTES);
const nodeInput = Buffer.alloc(65, 1);
let slab = Buffer.allocUnsafeSlow(SLAB_BYTES);
let slabUsed = 0;

/** A digest (as hash() returns it in 'binary', Latin-1: one character per byte) in memory that stays as it is. */
function kept(digest: string): Hash {
  if (slabUsed === SLAB_BYTES) {
    slab = Buffer.allocUnsafeSlow(SLAB_BYTES);
    slabUsed = 0;
  }
  const at = slabUsed;
  slab.write(digest, at, 32, 'binary');
  slabUsed += 32;
  return slab.subarray(at, at + 32);
}

export function leafHash(entry: Uint8Array): Hash {
  if (entry.length >= LEAF_INPUT_BYTES) return kept(hash('sha256', Buffer.concat([LEAF_PREFIX, entry]), 'binary'));
  leafInput.set(entry, 1);
  return kept(hash('sha256', leafInput.subarray(0, entry.length + 1), 'binary'));
}

export function nodeHash(left: Hash, right: Hash): Hash {
  nodeInput.set(left, 1);
  nodeInput.set(right, 33);
  return kept(hash('sha256', nodeInput, 'binary'));
}

/** The hash of the complete subtree of 2^level leaves starting at leaf index × 2^level. */
export type SubtreeHash = (level: number, index: number) => Hash;

/** The largest power of two smaller than n (n > 1): where RFC 6962 splits a tree of n leaves. */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** MTH(D[start : start + n]) from complete subtrees: a power-of-two range aligned on its size is one lookup. */
export function rangeHash(subtree: SubtreeHash, start: number, n: number): Hash {
  if (n === 0) return EMPTY_ROOT;
  if ((n & (n - 1)) === 0 && start % n === 0) return subtree(Math.log2(n), start / n);
  const k = split(n);
  return nodeHash(rangeHash(subtree, start, k), rangeHash(subtree, start + k, n - k));
}

export function treeHead(subtree: SubtreeHash, size: number): Hash {
  return rangeHash(subtree, 0, size);
}

/** PATH(m, D[start : start + n]) of RFC 6962 §2.1.1: the audit path of leaf m within the range. */
export function inclusionProof(subtree: SubtreeHash, index: number, size: number): Hash[] {
  if (index < 0 || index >= size) throw new RangeError(`leaf ${index} is not in a tree of ${size}`);
  const path = (m: number, start: number, n: number): Hash[] => {
    if (n === 1) return [];
    const k = split(n);
    return m < k
      ? [...path(m, start, k), rangeHash(subtree, start + k, n - k)]
      : [...path(m - k, start + k, n - k), rangeHash(subtree, start, k)];
  };
  return path(index, 0, size);
}

/** PROOF(m, D[n]) of RFC 6962 §2.1.2: proves the tree of m leaves is a prefix of the tree of n. */
export function consistencyProof(subtree: SubtreeHash, m: number, n: number): Hash[] {
  if (m < 0 || m > n) throw new RangeError(`no consistency proof from ${m} to ${n}`);
  if (m === 0 || m === n) return [];
  const subproof = (m: number, start: number, n: number, complete: boolean): Hash[] => {
    if (m === n) return complete ? [] : [rangeHash(subtree, start, n)];
    const k = split(n);
    return m <= k
      ? [...subproof(m, start, k, complete), rangeHash(subtree, start + k, n - k)]
      : [...subproof(m - k, start + k, n - k, false), rangeHash(subtree, start, k)];
  };
  return subproof(m, 0, n, true);
}

/** Complete-subtree hashes computed from a list of leaf hashes (for tests and for verifying an export). */
export function subtreesOf(leaves: Hash[]): SubtreeHash {
  const cache = new Map<string, Hash>();
  const compute = (level: number, index: number): Hash => {
    if (level === 0) return leaves[index]!;
    const key = `${level}:${index}`;
    let h = cache.get(key);
    if (!h) {
      h = nodeHash(compute(level - 1, 2 * index), compute(level - 1, 2 * index + 1));
      cache.set(key, h);
    }
    return h;
  };
  return compute;
}
