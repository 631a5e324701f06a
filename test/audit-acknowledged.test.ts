// The audit log's acknowledged entries (daemon/audit/acknowledged.ts), held between the journal and lmdb: the ring
// answers exactly as a map of the entries added and not yet dropped would, through growth, wrap-around, shrinking
// back, lmdb catching up past the last entry, and an entry that comes out of order.
import t from 'tap';
import { AcknowledgedEntries } from '../daemon/audit/acknowledged.js';

/** A small deterministic generator (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

t.test('the ring answers as a map of what was added and not dropped, whatever the lag', async (t) => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const next = random(seed);
    const ring = new AcknowledgedEntries();
    const held = new Map<number, Buffer>();
    let from = 1000 * seed;
    ring.dropBelow(from);
    let index = from;
    let mismatches = 0;
    const check = () => {
      for (let i = from - 3; i < index + 600; i++) if (ring.get(i) !== held.get(i)) mismatches++;
    };
    for (let step = 0; step < 400; step++) {
      const roll = next();
      if (roll < 0.55) {
        // A run of acknowledgements, now and then a long one (lmdb far behind: the ring must grow).
        const count = next() < 0.1 ? Math.floor(next() * 3000) : Math.floor(next() * 20);
        for (let n = 0; n < count; n++, index++) {
          const bytes = Buffer.from(`entry ${index}`);
          ring.add(index, bytes);
          held.set(index, bytes);
        }
      } else if (roll < 0.9) {
        // lmdb catches up part of the way, all of the way, or past the last acknowledged entry.
        const to = from + Math.floor(next() * (index - from + 40));
        ring.dropBelow(to);
        for (const key of held.keys()) if (key < to) held.delete(key);
        from = Math.max(from, to);
        index = Math.max(index, from);
      } else {
        // An entry out of order: held if lmdb does not have it yet, ignored if it does.
        const late = from - 5 + Math.floor(next() * 10);
        if (late < index) {
          const bytes = Buffer.from(`late ${late}`);
          ring.add(late, bytes);
          if (late >= from) held.set(late, bytes);
        }
      }
      check();
    }
    t.equal(mismatches, 0, `seed ${seed}: every read matched, ${index - 1000 * seed} entries in all`);
  }
});
