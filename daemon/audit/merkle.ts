// RFC 6962 / RFC 9162 Merkle trees: leaf and interior hashing, tree heads, inclusion and consistency proofs, and
// their verification. Proof generation works over any source of complete-subtree hashes, so the log can answer from
// the subtrees it stores (O(log n) lookups) and tests can answer from a plain list of leaves.
import { createHash } from 'node:crypto';

export type Hash = Buffer;

export const EMPTY_ROOT: Hash = createHash('sha256').digest();

export function leafHash(entry: Uint8Array): Hash {
  return createHash('sha256').update(Buffer.of(0)).update(entry).digest();
}

export function nodeHash(left: Hash, right: Hash): Hash {
  return createHash('sha256').update(Buffer.of(1)).update(left).update(right).digest();
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

/** RFC 9162 §2.1.3.2. */
export function verifyInclusion(leaf: Hash, index: number, size: number, proof: Hash[], root: Hash): boolean {
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(size) || index < 0 || index >= size) return false;
  if (leaf.length !== 32 || root.length !== 32) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (p.length !== 32 || sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && r.equals(root);
}

/** RFC 9162 §2.1.4.2. */
export function verifyConsistency(m: number, n: number, firstRoot: Hash, secondRoot: Hash, proof: Hash[]): boolean {
  if (!Number.isSafeInteger(m) || !Number.isSafeInteger(n) || m < 0 || m > n) return false;
  if (firstRoot.length !== 32 || secondRoot.length !== 32) return false;
  if (m === n) return proof.length === 0 && firstRoot.equals(secondRoot);
  if (m === 0) return proof.length === 0 && firstRoot.equals(EMPTY_ROOT);
  if (!proof.length || proof.some((p) => p.length !== 32)) return false;
  const path = (m & (m - 1)) === 0 ? [firstRoot, ...proof] : [...proof];
  let fn = m - 1;
  let sn = n - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && fr.equals(firstRoot) && sr.equals(secondRoot);
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
