// The audit log's Merkle tree against RFC 6962's published test vectors (the Certificate Transparency reference
// leaves), its proofs through the offline verifier's RFC 9162 checks, the log's stored subtrees against a tree built
// from the leaves, and a call's entry bytes against the generic canonical JSON of its fields.
import { appendFileSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import t from 'tap';
import { AuditLog, callEntryJson, canonicalJson, isoTime, merkle, type CallRecord } from '../daemon/audit/index.js';
import { openStore, type Store } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';
import { startStandInApp, type ScriptedEngine } from './helpers/app.js';

const { leafHash, inclusionProof, consistencyProof, treeHead, subtreesOf, EMPTY_ROOT } = merkle;
type Hash = Buffer;
// Proofs are checked with the offline verifier's own code (plain JavaScript with no types: imported by URL), the code
// an operator runs against what the daemon produces.
const { verifyInclusion, verifyConsistency } = (await import(new URL('../tools/verify-anchors.mjs', import.meta.url).href)) as {
  verifyInclusion: (leaf: Hash, index: number, size: number, proof: Hash[], root: Hash) => boolean;
  verifyConsistency: (m: number, n: number, firstRoot: Hash, secondRoot: Hash, proof: Hash[]) => boolean;
};

const hex = (h: Buffer) => h.toString('hex');
const unhex = (s: string) => Buffer.from(s, 'hex');

// RFC 6962's reference leaves and tree heads for sizes 1..8.
const LEAVES = ['', '00', '10', '2021', '3031', '40414243', '5051525354555657', '606162636465666768696a6b6c6d6e6f'].map((l) =>
  leafHash(unhex(l)),
);
const ROOTS = [
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];
const INCLUSION: Array<[number, number, string[]]> = [
  [
    0,
    8,
    [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
  [
    5,
    8,
    [
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
];
const CONSISTENCY: Array<[number, number, string[]]> = [
  [
    2,
    8,
    [
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
  [
    6,
    8,
    [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
];

t.test('RFC 6962 test vectors: tree heads, inclusion and consistency proofs', async (t) => {
  const subtree = subtreesOf(LEAVES);
  t.equal(hex(treeHead(subtree, 0)), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', 'the empty tree');
  for (let n = 1; n <= 8; n++) t.equal(hex(treeHead(subtree, n)), ROOTS[n - 1], `tree head of ${n}`);
  for (const [index, size, proof] of INCLUSION) {
    t.same(inclusionProof(subtree, index, size).map(hex), proof, `inclusion of leaf ${index} in ${size}`);
    t.ok(verifyInclusion(LEAVES[index], index, size, proof.map(unhex), unhex(ROOTS[size - 1])));
  }
  for (const [m, n, proof] of CONSISTENCY) {
    t.same(consistencyProof(subtree, m, n).map(hex), proof, `consistency ${m} → ${n}`);
    t.ok(verifyConsistency(m, n, unhex(ROOTS[m - 1]), unhex(ROOTS[n - 1]), proof.map(unhex)));
  }
});

t.test('every proof of every tree up to 40 leaves verifies, and a changed proof never does', async (t) => {
  const leaves = Array.from({ length: 40 }, (_, i) => leafHash(Buffer.from(`entry ${i}`)));
  const subtree = subtreesOf(leaves);
  const roots = Array.from({ length: 41 }, (_, n) => treeHead(subtree, n));
  let checked = 0;
  let rejected = 0;
  for (let n = 1; n <= 40; n++) {
    for (let i = 0; i < n; i++) {
      const proof = inclusionProof(subtree, i, n);
      if (!verifyInclusion(leaves[i], i, n, proof, roots[n])) t.fail(`inclusion ${i}/${n}`);
      if (verifyInclusion(leaves[(i + 1) % n], i, n, proof, roots[n]) && n > 1) t.fail(`wrong leaf accepted ${i}/${n}`);
      if (proof.length) {
        const bad = proof.map((h) => Buffer.from(h));
        bad[bad.length - 1][0] ^= 1;
        if (verifyInclusion(leaves[i], i, n, bad, roots[n])) t.fail(`changed inclusion proof accepted ${i}/${n}`);
        else rejected++;
        if (verifyInclusion(leaves[i], i, n, proof.slice(0, -1), roots[n])) t.fail(`short proof accepted ${i}/${n}`);
      }
      checked++;
    }
    for (let m = 0; m <= n; m++) {
      const proof = consistencyProof(subtree, m, n);
      if (!verifyConsistency(m, n, roots[m], roots[n], proof)) t.fail(`consistency ${m} → ${n}`);
      if (m > 0 && m < n) {
        if (verifyConsistency(m, n, roots[m - 1], roots[n], proof)) t.fail(`wrong old root accepted ${m} → ${n}`);
        const bad = proof.map((h) => Buffer.from(h));
        bad[0][5] ^= 0x80;
        if (verifyConsistency(m, n, roots[m], roots[n], bad)) t.fail(`changed consistency proof accepted ${m} → ${n}`);
        else rejected++;
      }
      checked++;
    }
  }
  t.ok(checked > 800 && rejected > 700, `${checked} proofs verified, ${rejected} altered proofs rejected`);
  t.equal(hex(treeHead(subtree, 0)), hex(EMPTY_ROOT));
});

t.test('a hash handed out stays as it was while thousands more are made, whatever the size of the entry', async (t) => {
  const { nodeHash } = merkle;
  const digest = (bytes: Buffer) => createHash('sha256').update(bytes).digest();
  const entries = Array.from({ length: 3000 }, (_, i) => Buffer.alloc(i % 7 === 0 ? 5000 + i : i % 300, i));
  const leaves = entries.map((e) => leafHash(e));
  const nodes = leaves.slice(1).map((l, i) => nodeHash(leaves[i], l));
  let wrong = 0;
  entries.forEach((e, i) => {
    if (!leaves[i].equals(digest(Buffer.concat([Buffer.of(0), e])))) wrong++;
  });
  nodes.forEach((n, i) => {
    if (!n.equals(digest(Buffer.concat([Buffer.of(1), leaves[i], leaves[i + 1]])))) wrong++;
  });
  t.equal(wrong, 0, 'every leaf and node hash is the digest of its input, read after all were made');
  t.ok(
    leaves.every((l) => l.length === 32),
    'each is 32 bytes',
  );
});

t.test('the log in lmdb: stored subtrees give the same heads and proofs, durably, across reopening', async (t) => {
  const dir = tempDir(t);
  const entries = Array.from({ length: 37 }, (_, i) => ({ n: i, text: `call ${i}`, nested: { b: 2, a: [1, 'x'] } }));
  let store = openStore(dir);
  let log = AuditLog.open(store);
  // Appended concurrently: indexes follow the order of the calls, and the commits are shared.
  const indexes = await Promise.all(entries.slice(0, 20).map((e) => log.append(e)));
  t.same(indexes, [...Array(20).keys()]);
  await store.close();
  store = openStore(dir);
  log = AuditLog.open(store);
  t.equal(log.size, 20, 'reopened with every committed entry');
  for (const e of entries.slice(20)) await log.append(e);
  const leaves = entries.map((e) => leafHash(Buffer.from(canonicalJson(e))));
  const reference = subtreesOf(leaves);
  for (let n = 1; n <= 37; n++) {
    if (!log.root(n).equals(treeHead(reference, n))) t.fail(`root of ${n}`);
    for (let m = 0; m <= n; m++)
      if (hex(Buffer.concat(log.consistency(m, n))) !== hex(Buffer.concat(consistencyProof(reference, m, n))))
        t.fail(`consistency ${m} → ${n}`);
  }
  for (let i = 0; i < 37; i++) t.same(log.inclusion(i, 37).map(hex), inclusionProof(reference, i, 37).map(hex));
  t.equal(log.entry(3)!.toString(), '{"n":3,"nested":{"a":[1,"x"],"b":2},"text":"call 3"}', 'entries are canonical JSON (keys sorted)');
  t.throws(() => log.root(38), /has 37 entries/);
  await store.close();
});

type EntriesDb = ReturnType<Store['bytes']>;

/** The store, with the entries database's `put` replaced whenever `replace` gives a replacement for it. */
function withEntriesPut(store: Store, replace: (db: EntriesDb) => ((key: number, value: Buffer) => Promise<boolean>) | undefined): Store {
  return {
    ...store,
    bytes(name) {
      const db = store.bytes(name);
      if (name !== 'audit-entries') return db;
      return new Proxy(db, {
        get(target, prop, receiver) {
          const put = prop === 'put' ? replace(target) : undefined;
          if (put) return put;
          const value = Reflect.get(target, prop, receiver) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        },
      });
    },
  };
}

/** The store, except that the entries database's next put after failNextPut() fails, as a full disk would make it. */
function failingOnce(store: Store): { failing: Store; failNextPut: () => void } {
  let failNext = false;
  const failing = withEntriesPut(store, () => {
    if (!failNext) return undefined;
    failNext = false;
    return () => Promise.reject(new Error('MDB_MAP_FULL'));
  });
  return { failing, failNextPut: () => (failNext = true) };
}

t.test("an entry handed to lmdb owns its memory: not a slice of Node's shared 8 KB pool, which it would keep alive", async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  const handed: Buffer[] = [];
  const recording = withEntriesPut(store, (db) => (key, value) => {
    handed.push(value);
    return db.put(key, value);
  });
  const log = AuditLog.open(recording, { journalDir: dir });
  // Short entries, the kind Buffer.from cuts from the pool.
  for (let n = 0; n < 4; n++) await log.append({ n, text: 'رقم الحساب' });
  await log.settled();
  t.equal(handed.length, 4);
  for (const bytes of handed) {
    t.equal(bytes.buffer.byteLength, bytes.length, 'the entry is its whole allocation');
    t.equal(bytes.byteOffset, 0);
  }
  t.equal(handed[3]?.toString('utf8'), canonicalJson({ n: 3, text: 'رقم الحساب' }));
  await log.close();
  await store.close();
});

t.test('a failed write stops the log without a hole; a hole left on disk is cut off at the next start', async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  const { failing, failNextPut } = failingOnce(store);
  const log = AuditLog.open(failing);
  for (let i = 0; i < 3; i++) await log.append({ n: i });
  failNextPut();
  const results = await Promise.allSettled([log.append({ n: 3 }), log.append({ n: 4 })]);
  t.same(
    results.map((r) => r.status),
    ['rejected', 'rejected'],
    'the failed entry and the one after it (which committed) are both refused',
  );
  await t.rejects(log.append({ n: 5 }), /stopped after a failed write/, 'and nothing more is appended');
  t.equal(log.size, 3);
  t.match(log.problem, /MDB_MAP_FULL/);
  t.ok(log.root(3).equals(treeHead(subtreesOf([0, 1, 2].map((n) => leafHash(Buffer.from(canonicalJson({ n }))))), 3)));
  await store.close();

  // On disk: entries 0..2, then 4 (3 never committed). Reopening cuts the log back to 3, subtrees included.
  const reopened = openStore(dir);
  t.ok(reopened.bytes('audit-entries').get(4), 'the entry after the hole reached the disk');
  const repaired = AuditLog.open(reopened);
  t.equal(repaired.size, 3, 'the log ends where the hole begins');
  t.notOk(reopened.bytes('audit-entries').get(4), 'what followed the hole is gone');
  for (let i = 3; i < 9; i++) await repaired.append({ n: i });
  const reference = subtreesOf(Array.from({ length: 9 }, (_, n) => leafHash(Buffer.from(canonicalJson({ n })))));
  for (let n = 1; n <= 9; n++) if (!repaired.root(n).equals(treeHead(reference, n))) t.fail(`root ${n} after repair`);
  t.pass('heads and proofs are right again after the repair');
  await reopened.close();
});

t.test('with the write-ahead journal: acknowledged entries lmdb lost come back at the next start; a torn record is dropped', async (t) => {
  const dir = tempDir(t);
  const entries = Array.from({ length: 13 }, (_, n) => ({ n }));
  let store = openStore(dir);
  let log = AuditLog.open(store, { journalDir: dir });
  for (const e of entries) await log.append(e);
  await log.close();
  await store.close();

  // A crash after entries 8..12 were acknowledged (journal synced) but before lmdb had them on disk: lmdb lost the
  // entries and the subtrees they completed. The crash also tore the journal's last write.
  store = openStore(dir);
  const stored = store.bytes('audit-entries');
  const nodes = store.bytes('audit-nodes');
  for (let i = 8; i < 13; i++) stored.removeSync(i);
  for (let level = 1; level <= 4; level++) for (let i = Math.floor(8 / 2 ** level); i < 16; i++) nodes.removeSync(level * 2 ** 40 + i);
  await store.close();
  const journals = readdirSync(dir).filter((f) => f.startsWith('audit-journal.'));
  t.same(journals, ['audit-journal.1']);
  appendFileSync(join(dir, journals[0]), Buffer.from([0x40, 0, 0, 0, 1, 2, 3, 4, 5]));

  store = openStore(dir);
  t.equal(AuditLog.open(store).size, 8, 'lmdb alone has 8 entries');
  log = AuditLog.open(store, { journalDir: dir });
  t.equal(log.size, 13, 'the journal brought back every acknowledged entry');
  const reference = subtreesOf(entries.map((e) => leafHash(Buffer.from(canonicalJson(e)))));
  for (let n = 1; n <= 13; n++) if (!log.root(n).equals(treeHead(reference, n))) t.fail(`root ${n} after replay`);
  for (let i = 0; i < 13; i++) t.same(log.inclusion(i, 13).map(hex), inclusionProof(reference, i, 13).map(hex));
  t.equal(await log.append({ n: 13 }), 13, 'appends go on after the replay');
  await store.flushed();
  await new Promise((r) => setTimeout(r, 20));
  t.same(
    readdirSync(dir).filter((f) => f.startsWith('audit-journal.')),
    ['audit-journal.2'],
    'the replayed file is removed once lmdb has its entries on disk',
  );
  await log.close();
  await store.close();
});

t.test('with the journal, lmdb gets entries in batches: an acknowledged entry is readable at once, proofs wait for lmdb', async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  const log = AuditLog.open(store, { journalDir: dir });
  const entries = Array.from({ length: 5 }, (_, n) => ({ n }));
  const indexes = await Promise.all(entries.map((e) => log.append(e)));
  t.same(indexes, [0, 1, 2, 3, 4], 'indexes in the order of the appends');
  // Acknowledged means in the journal; lmdb's batch waits a few milliseconds, and until it is written proofs and
  // checkpoints cannot cover the entries (size), but each entry is readable.
  t.equal(log.readable, 5);
  t.ok(log.size <= 5);
  t.equal(log.entry(4)?.toString('utf8'), canonicalJson({ n: 4 }), 'an acknowledged entry is readable at once');
  await log.settled();
  t.equal(log.size, 5, 'settled: lmdb holds every entry');
  t.equal(store.bytes('audit-entries').get(4)?.toString('utf8'), canonicalJson({ n: 4 }));
  const reference = subtreesOf(entries.map((e) => leafHash(Buffer.from(canonicalJson(e)))));
  t.ok(log.root().equals(treeHead(reference, 5)), 'and the subtrees written with them give the right head');
  // Entries still waiting for their batch when the log closes are written before it does.
  await log.append({ n: 5 });
  await log.close();
  t.equal(store.bytes('audit-entries').get(5)?.toString('utf8'), canonicalJson({ n: 5 }), 'close writes the last batch');
  await store.close();
});

t.test('while lmdb lags behind the journal, every acknowledged entry stays readable, however many', async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  // A log that does not start at 0, so the entries held do not start at the beginning of anything.
  const first = AuditLog.open(store, { journalDir: dir });
  for (let n = 0; n < 300; n++) void first.append({ n });
  await first.settled();
  await first.close();
  let release = () => {};
  const lmdbBack = new Promise<void>((resolve) => (release = resolve));
  const lagging = withEntriesPut(store, (db) => (key, value) => lmdbBack.then(() => db.put(key, value)));
  const log = AuditLog.open(lagging, { journalDir: dir });
  t.equal(log.size, 300);
  // Far more entries than lmdb's batches hold, all acknowledged by the journal while lmdb has none of them.
  const indexes = await Promise.all(Array.from({ length: 1500 }, (_, i) => log.append({ n: 300 + i })));
  t.equal(indexes[1499], 1799);
  t.equal(log.size, 300, 'lmdb has none of them yet');
  t.equal(log.readable, 1800);
  const wrong = indexes.filter((n) => log.entry(n)?.toString('utf8') !== canonicalJson({ n }));
  t.same(wrong, [], 'each acknowledged entry is readable, and is itself');
  const past = [1800, 1801, 2047, 2048, 2348, 3000, 4396, 10_000, 2 ** 40].filter((n) => log.entry(n) !== undefined);
  t.same(past, [], 'nothing for an index past the last one');
  t.equal(log.entry(299)?.toString('utf8'), canonicalJson({ n: 299 }), 'and the entries before them come from lmdb');
  release();
  await log.settled();
  t.equal(log.size, 1800);
  t.equal(log.entry(1799)?.toString('utf8'), canonicalJson({ n: 1799 }), 'read from lmdb once it has them');
  t.same(await Promise.all([log.append({ n: 1800 }), log.append({ n: 1801 })]), [1800, 1801], 'and appending goes on');
  t.equal(log.entry(1801)?.toString('utf8'), canonicalJson({ n: 1801 }));
  await log.close();
  await store.close();
});

t.test('with the journal, a failed lmdb batch stops the log without losing what the journal acknowledged', async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  const { failing, failNextPut } = failingOnce(store);
  const log = AuditLog.open(failing, { journalDir: dir });
  for (let i = 0; i < 3; i++) await log.append({ n: i });
  await log.settled();
  failNextPut();
  // The journal acknowledges both; their lmdb batch fails.
  t.same(await Promise.all([log.append({ n: 3 }), log.append({ n: 4 })]), [3, 4], 'acknowledged: they are in the journal');
  await t.rejects(log.settled(), /MDB_MAP_FULL/, 'the lmdb batch failed');
  await t.rejects(log.append({ n: 5 }), /stopped after a failed write/, 'and nothing more is appended');
  t.match(log.problem, /MDB_MAP_FULL/);
  t.equal(log.size, 3, 'proofs cover only what lmdb holds');
  await log.close();
  await store.close();

  const reopened = openStore(dir);
  const replayed = AuditLog.open(reopened, { journalDir: dir });
  t.equal(replayed.size, 5, 'the next start replays the acknowledged entries from the journal');
  const reference = subtreesOf(Array.from({ length: 5 }, (_, n) => leafHash(Buffer.from(canonicalJson({ n })))));
  t.ok(replayed.root(5).equals(treeHead(reference, 5)));
  await replayed.close();
  await reopened.close();
});

/** As a crash leaves things: lmdb lost entries `from`..`to - 1` and the subtrees they completed; the journal has them. */
async function loseFromLmdb(dir: string, from: number, to: number): Promise<void> {
  const store = openStore(dir);
  const stored = store.bytes('audit-entries');
  const nodes = store.bytes('audit-nodes');
  for (let i = from; i < to; i++) stored.removeSync(i);
  for (let level = 1; level <= 5; level++) for (let i = Math.floor(from / 2 ** level); i < 32; i++) nodes.removeSync(level * 2 ** 40 + i);
  await store.close();
}

const journalFiles = (dir: string) => readdirSync(dir).filter((f) => f.startsWith('audit-journal.'));

/** Waits (up to 10 s) for `done`, which background work (lmdb's flush, then the journal's clean-up) makes true. */
async function until(done: () => boolean): Promise<boolean> {
  for (const start = Date.now(); Date.now() - start < 10_000; await new Promise((r) => setTimeout(r, 10))) if (done()) return true;
  return done();
}

t.test('the journal moved, with crashes between: what it acknowledged in each place is replayed, and the old files go', async (t) => {
  const dataDir = tempDir(t);
  const [first, second, third] = [tempDir(t), tempDir(t), join(tempDir(t), 'made', 'for', 'it')];
  let store = openStore(dataDir);
  let log = AuditLog.open(store, { journalDir: first });
  for (let n = 0; n < 13; n++) await log.append({ n });
  await log.close();
  await store.close();
  await loseFromLmdb(dataDir, 8, 13);

  // Moved; and this run crashes before lmdb ever flushes, so its clean-up never happens.
  store = openStore(dataDir);
  const neverFlushed: Store = { ...store, flushed: () => new Promise<void>(() => {}) };
  log = AuditLog.open(neverFlushed, { journalDir: second });
  t.equal(log.size, 13, 'the entries acknowledged in the old directory are back');
  for (let n = 13; n < 16; n++) t.equal(await log.append({ n }), n, 'appends go on in the new one');
  await log.close();
  await store.close();
  await loseFromLmdb(dataDir, 8, 16);

  // Moved again, to a directory that does not exist yet: both earlier directories are still searched.
  store = openStore(dataDir);
  log = AuditLog.open(store, { journalDir: third });
  t.equal(log.size, 16, 'the entries acknowledged in both earlier directories are back');
  const reference = subtreesOf(Array.from({ length: 16 }, (_, n) => leafHash(Buffer.from(canonicalJson({ n })))));
  for (let n = 1; n <= 16; n++) if (!log.root(n).equals(treeHead(reference, n))) t.fail(`root ${n} after the moves`);
  t.ok(await until(() => !journalFiles(first).length && !journalFiles(second).length), 'the old files go once lmdb has them');
  t.same(journalFiles(third), ['audit-journal.1'], 'made, with its first file');
  await log.close();
  await store.close();

  // Forgotten once their files are gone: they may go too.
  rmSync(first, { recursive: true });
  rmSync(second, { recursive: true });
  store = openStore(dataDir);
  log = AuditLog.open(store, { journalDir: third });
  t.equal(log.size, 16);
  await log.close();
  await store.close();
});

t.test('a directory the journal was kept in that is missing, or shows an empty mount point, stops the start', async (t) => {
  const dataDir = tempDir(t);
  const kept = tempDir(t);
  let store = openStore(dataDir);
  const log = AuditLog.open(store, { journalDir: kept });
  for (let n = 0; n < 3; n++) await log.append({ n });
  await log.close();
  await store.close();
  await loseFromLmdb(dataDir, 1, 3);

  store = openStore(dataDir);
  renameSync(kept, `${kept}.device`);
  for (const journalDir of [kept, join(dataDir, 'journal')]) {
    t.throws(
      () => AuditLog.open(store, { journalDir }),
      /cannot read the audit journal files in .*, where the journal has been kept \(ENOENT.*mount its device.*audit-journal-dirs\.json/,
      `missing, journaling in ${journalDir === kept ? 'it' : 'another'}`,
    );
  }
  mkdirSync(kept); // the mount point, its device not mounted
  for (const journalDir of [kept, join(dataDir, 'journal')]) {
    t.throws(
      () => AuditLog.open(store, { journalDir }),
      /is where the audit journal has been kept, but it holds no audit-journal-log\.id of this log: its device is not mounted\?/,
      `an empty mount point, journaling in ${journalDir === kept ? 'it' : 'another'}`,
    );
  }
  t.same(readdirSync(kept), [], 'nothing was written on the mount point');
  rmSync(kept, { recursive: true });
  renameSync(`${kept}.device`, kept);
  const back = AuditLog.open(store, { journalDir: kept });
  t.equal(back.size, 3, 'back: the entries it held are replayed');
  await back.close();
  await store.close();
});

t.test("a journal directory holding another log's journal stops the start", async (t) => {
  const journal = tempDir(t);
  let store = openStore(tempDir(t));
  const log = AuditLog.open(store, { journalDir: journal });
  await log.append({ n: 0 });
  await log.close();
  await store.close();
  // A data directory started afresh, the journal's directory kept: its files are not this new log's.
  store = openStore(tempDir(t));
  t.throws(
    () => AuditLog.open(store, { journalDir: journal }),
    /holds another audit log's journal \(its audit-journal-log\.id differs\): empty it, or keep this journal elsewhere/,
  );
  t.equal(AuditLog.open(store).size, 0, 'nothing of it was replayed');
  await store.close();
});

t.test('journal files in a former directory the log does not remember (the daemon passes the data directory) are replayed', async (t) => {
  const dataDir = tempDir(t);
  const elsewhere = tempDir(t);
  let store = openStore(dataDir);
  let log = AuditLog.open(store, { journalDir: dataDir });
  for (let n = 0; n < 5; n++) await log.append({ n });
  await log.close();
  await store.close();
  // As a log from before the journal could move: nothing names the directories it was kept in.
  rmSync(join(dataDir, 'audit-journal-dirs.json'));
  await loseFromLmdb(dataDir, 2, 5);

  store = openStore(dataDir);
  const unaware = AuditLog.open({ ...store, flushed: () => new Promise<void>(() => {}) }, { journalDir: elsewhere });
  t.equal(unaware.size, 2, 'not found without being told where to look');
  await unaware.close();
  log = AuditLog.open(store, { journalDir: elsewhere, formerJournalDirs: [dataDir] });
  t.equal(log.size, 5);
  const file = join(dataDir, 'sovereign.mdb');
  t.throws(
    () => AuditLog.open(store, { journalDir: join(file, 'journal') }),
    /cannot keep the audit journal in .*sovereign\.mdb\/journal \(audit\.journalDir, default the data directory\): ENOTDIR/,
    'a journal directory that cannot be one says which and why',
  );
  await log.close();
  await store.close();
});

t.test("the daemon's journal is where audit.journalDir says (here from SOVEREIGN_AUDIT_JOURNAL_DIR)", async (t) => {
  const dir = join(tempDir(t), 'journal');
  const echo: ScriptedEngine = {
    async close() {},
    async chat(_model, req) {
      const usage = { promptTokens: 1, completionTokens: 1 };
      return { content: req.messages.at(-1)?.content ?? '', toolCalls: [], finishReason: 'stop', usage };
    },
  };
  const { baseURL, secret } = await startStandInApp(t, { echo: { engine: echo } }, {}, { SOVEREIGN_AUDIT_JOURNAL_DIR: dir });
  const res = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hello' }] }),
  });
  t.equal(res.status, 200);
  t.match(res.headers.get('x-audit-leaf'), /^\d+$/);
  await res.text();
  const files = journalFiles(dir);
  t.equal(files.length, 1, 'made, with one journal file');
  t.ok(
    files.some((f) => statSync(join(dir, f)).size > 0),
    'the entry is in it',
  );
});

t.test("a call's entry is written as the canonical JSON of its fields, whatever they hold", async (t) => {
  const base: CallRecord = {
    requestId: 'req_0123',
    keyId: 'key_abc',
    projectId: 'proj_x',
    method: 'POST',
    route: '/v1/chat/completions',
    model: 'bench-chat',
    status: 200,
    redactions: { NATIONAL_ID: 1, IQAMA: 0, IBAN: 2, CARD: 0 },
    answerRedactions: { NATIONAL_ID: 0, IQAMA: 3, IBAN: 0, CARD: 1 },
    requestSha256: 'a'.repeat(64),
    responseSha256: 'b'.repeat(64),
  };
  const variants: Array<[string, CallRecord]> = [
    ['a plain call', base],
    ['a call that left the boundary', { ...base, leftBoundary: 'openai' }],
    ['a streamed call, naming its start', { ...base, streamStart: 17 }],
    ['a streamed call whose start is leaf 0, that left the boundary', { ...base, streamStart: 0, leftBoundary: 'openai' }],
    ['no model, no redactions, an error status', { ...base, model: null, redactions: null, answerRedactions: null, status: 503 }],
    // Quotes, backslashes, control characters, Arabic, a lone surrogate: each must be escaped as JSON.stringify does.
    ['strings that need escaping', { ...base, route: '/v1/"x"\\\n\u0001', model: 'نموذج\ud800', projectId: 'p\u2028q' }],
  ];
  for (const [name, call] of variants) {
    const time = '2026-11-23T03:00:00.123Z';
    const expected = canonicalJson({
      kind: 'call',
      v: 3,
      time,
      request_id: call.requestId,
      key: call.keyId,
      project: call.projectId,
      method: call.method,
      route: call.route,
      model: call.model,
      status: call.status,
      region: 'sa-riyadh-1',
      redactions: call.redactions,
      answer_redactions: call.answerRedactions,
      request_sha256: call.requestSha256,
      response_sha256: call.responseSha256,
      left_boundary: call.leftBoundary ?? undefined,
      stream_start: call.streamStart ?? undefined,
    });
    t.equal(callEntryJson(call, time, 'sa-riyadh-1'), expected, name);
  }
});

t.test("an entry's time is the string toISOString makes, whatever the millisecond and in whatever order times come", async (t) => {
  const now = Date.UTC(2026, 10, 25, 16, 40, 12, 345);
  const times = [
    now,
    now + 1,
    now + 654,
    now + 655,
    now - 345,
    now - 346,
    now - 1000,
    now + 86_400_000 * 400,
    0,
    9,
    10,
    99,
    100,
    999,
    -1,
    -1001,
  ];
  for (let i = 0; i < 2000; i++) times.push(now + Math.floor((Math.random() - 0.5) * 10_000_000));
  const differ = times.filter((ms) => isoTime(ms) !== new Date(ms).toISOString());
  t.same(differ, [], `${times.length} times`);
  t.match(isoTime(), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'now');
});
