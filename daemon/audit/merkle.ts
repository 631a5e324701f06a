// RFC 6962 / RFC 9162 Merkle trees: leaf and interior hashing, tree heads, inclusion and consistency proofs. Proofs
// are verified by tools/verify-anchors.mjs, the one verifier an operator runs (the tests use it too). Generation works
// over any source of complete-subtree hashes, so the log answers from the subtrees it stores (O(log n) lookups) and
// tests from a plain list of leaves.
import { createHash, hash } from 'node:crypto';

export type Hash = Buffer;

export const EMPTY_ROOT: Hash = createHash('sha256').digest();

// One-shot hashing over one buffer: about twice as fast as a Hash object for inputs this small.
const LEAF_PREFIX = Buffer.of(0);

export function leafHash(entry: Uint8Array): Hash {
  return hash('sha256', Buffer.concat([LEAF_PREFIX, entry]), 'buffer');
}

export function nodeHash(left: Hash, right: Hash): Hash {
  const input = Buffer.allocUnsafe(65);
  input[0] = 1;
  left.copy(input, 1);
  right.copy(input, 33);
  return hash('sha256', input, 'buffer');
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
