// Finding an entry by its request id (the dashboard's lookup) reads the log's index, not the log: on a log of many
// entries, a lookup of an old entry reads a handful of entries, not every one after it. The index is written with the
// entries' lmdb batches, catches up at a start (a log from before the index, a crash replay), and a lookup right
// after an append, before lmdb holds the entry, still finds it. Through the audit module's public API.
import t from 'tap';
import { AuditLog } from '../daemon/audit/index.js';
import { openStore, type Store } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';

const ENTRIES = 30_000;
const idOf = (i: number) => `req_${i.toString(16).padStart(32, '0')}`;
const entryOf = (i: number, project = 'acme') => ({ kind: 'call', v: 3, request_id: idOf(i), project, status: 200 });

/** A log with `count` entries, appended in batches (as calls would be), each naming its request id. */
async function buildLog(store: Store, dir: string, count: number): Promise<AuditLog> {
  const log = AuditLog.open(store, { journalDir: dir });
  for (let from = 0; from < count; from += 1000) {
    const appends: Array<Promise<number>> = [];
    for (let i = from; i < Math.min(count, from + 1000); i++) appends.push(log.appendCanonical(JSON.stringify(entryOf(i)), idOf(i)));
    await Promise.all(appends);
  }
  await log.settled();
  return log;
}

/** Counts the entries `log` reads while `fn` runs. */
function readsDuring<T>(log: AuditLog, fn: () => T): { result: T; reads: number } {
  const entry = log.entry.bind(log);
  let reads = 0;
  log.entry = (index: number) => {
    reads++;
    return entry(index);
  };
  try {
    return { result: fn(), reads };
  } finally {
    log.entry = entry;
  }
}

t.test('a lookup of an old entry in a long log reads the index, not the entries after it', async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  t.teardown(() => store.close());
  const log = await buildLog(store, dir, ENTRIES);
  t.teardown(() => log.close());
  t.equal(log.size, ENTRIES);

  const old = readsDuring(log, () => log.findRequest(idOf(7)));
  t.equal(old.result, 7, 'the oldest entries are found');
  t.ok(old.reads <= 2, `and ${old.reads} entries were read to find it, not the ${ENTRIES - 7} after it`);
  t.equal(log.findRequest(idOf(ENTRIES - 1)), ENTRIES - 1, 'and the newest');
  const missing = readsDuring(log, () => log.findRequest(idOf(ENTRIES + 5)));
  t.equal(missing.result, null, 'an id never logged is not found');
  t.ok(missing.reads <= 1, `without a scan (${missing.reads} entries read)`);

  // The newest entry for an id wins (a stream's end entry after its start).
  const again = await log.appendCanonical(JSON.stringify({ ...entryOf(7), kind: 'call', stream_start: 7 }), idOf(7));
  t.equal(log.findRequest(idOf(7)), again, 'right after the append, before lmdb holds it');
  await log.settled();
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(readsDuring(log, () => log.findRequest(idOf(7))).result, again, 'and once the index holds it');
});

t.test('the index catches up at a start: for a log written before it existed, and for entries a crash replay put back', async (t) => {
  const dir = tempDir(t);
  let store = openStore(dir);
  let log = await buildLog(store, dir, 5000);
  await log.close();
  // As an older daemon left it: entries, no index.
  store.db('audit-request-ids').clearSync();
  await store.close();

  store = openStore(dir);
  log = AuditLog.open(store, { journalDir: dir });
  t.equal(log.findRequest(idOf(3)), 3, 'an entry from before the index is found after a start');
  t.equal(log.findRequest(idOf(4999)), 4999);
  await log.close();
  await store.close();

  // A crash after the journal took entries and before lmdb committed them: lmdb lost them (and their index keys).
  store = openStore(dir);
  log = AuditLog.open(store, { journalDir: dir });
  const appends: Array<Promise<number>> = [];
  for (let i = 5000; i < 5100; i++) appends.push(log.appendCanonical(JSON.stringify(entryOf(i)), idOf(i)));
  await Promise.all(appends);
  await log.close();
  for (let i = 5000; i < 5100; i++) store.bytes('audit-entries').removeSync(i);
  for (let i = 5000; i < 5100; i++) store.db('audit-request-ids').removeSync(idOf(i));
  store.db('audit-request-ids').putSync('#covered', 5000);
  await store.close();

  store = openStore(dir);
  t.teardown(() => store.close());
  log = AuditLog.open(store, { journalDir: dir });
  t.teardown(() => log.close());
  t.equal(log.size, 5100, 'the journal put the entries back');
  const replayed = readsDuring(log, () => log.findRequest(idOf(5050)));
  t.equal(replayed.result, 5050, 'and the index has them');
  t.ok(replayed.reads <= 2, `without a scan (${replayed.reads} entries read)`);
  t.equal(log.findRequest(idOf(10)), 10);
});
