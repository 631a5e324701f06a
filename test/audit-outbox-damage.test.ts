// The outbox (daemon/audit/outbox.ts) holds what another process wrote into the data directory. A record that is not
// an event the CLI makes (damaged, undecodable, huge, or carrying fields only the log sets) must neither stop the
// events behind it nor stop the log; an event of an unknown kind waits without a warning every second.
import t from 'tap';
import { AuditLog } from '../daemon/audit/log.js';
import { AuditOutbox, MAX_EVENT_BYTES, OutboxDrain } from '../daemon/audit/outbox.js';
import { entryJson, type EntryFields, type EntryKind } from '../daemon/audit/index.js';
import { openStore, type Store } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';

const ME = { cli: 'ops' };

function appender(log: AuditLog) {
  // As AuditService.append: a `request_id` field is indexed.
  return (kind: EntryKind, fields: EntryFields) =>
    log.appendCanonical(entryJson(kind, fields, 'T', 'r'), typeof fields.request_id === 'string' ? fields.request_id : null);
}

function recorder() {
  const lines: string[] = [];
  return {
    lines,
    logger: { warn: (_: object, msg: string) => void lines.push(msg), error: (_: object, msg: string) => void lines.push(msg) },
  };
}

const kindsIn = (log: AuditLog) =>
  Array.from({ length: log.size }, (_, i) => JSON.parse(log.entry(i)!.toString()) as Record<string, unknown>);

/** Puts a record straight into the outbox, as a damaged or foreign writer would, ahead of every real event. */
function putRaw(store: Store, key: string, value: unknown): void {
  store.db<unknown>('audit-outbox').putSync(`000000000000000-${key}`, value);
}

t.test('records that are not events are moved aside; the events behind them are logged', async (t) => {
  const dir = tempDir(t);
  // An undecodable record: written through a binary view of the same database, before the store opens it as events.
  const raw = openStore(dir);
  (raw.bytes('audit-outbox') as unknown as { putSync(k: string, v: Buffer): void }).putSync(
    '000000000000000-a-undecodable',
    Buffer.from([0xc1, 0xc1, 0xff]),
  );
  await raw.close();

  const store = openStore(dir);
  t.teardown(() => store.close());
  const log = AuditLog.open(store, { journalDir: dir });
  const id = (n: number) => `evt_${String(n).padStart(24, '0')}`;
  const base = { kind: 'project.created', at: '2026-01-01T00:00:00.000Z' };
  putRaw(store, 'b-nan', { ...base, id: id(1), fields: { by: ME, project: 'p', name: 'n', rpm: Number.NaN } });
  putRaw(store, 'c-null', null);
  putRaw(store, 'd-no-fields', { ...base, id: id(2) });
  putRaw(store, 'e-huge', { ...base, id: id(3), fields: { by: ME, project: 'p', name: 'x'.repeat(MAX_EVENT_BYTES + 1) } });
  putRaw(store, 'f-request-id', { ...base, id: id(4), fields: { by: ME, request_id: 'x'.repeat(5_000) } });
  putRaw(store, 'g-time', { ...base, id: id(5), fields: { by: ME, time: 'yesterday', region: 'elsewhere' } });
  putRaw(store, 'h-future', { ...base, kind: 'project.archived', id: id(6), fields: { by: ME } });
  const outbox = new AuditOutbox(store);
  outbox.put('project.created', { by: ME, project: 'proj_a', name: 'a' });

  const { lines, logger } = recorder();
  const drain = new OutboxDrain(store, log, appender(log), logger);
  t.equal(await drain.drain(), 1, 'the real event behind the damaged records is logged at the first drain');
  await log.settled();
  t.equal(log.problem, null, 'the log still takes entries');
  const entries = kindsIn(log);
  t.same(
    entries.filter((e) => e.kind === 'project.created').map((e) => e.project),
    ['proj_a'],
    'only the real event reached the log',
  );
  const setAside = entries.filter((e) => e.kind === 'outbox.rejected');
  t.same(
    setAside.map((e) => (e.outbox_key as string).slice(16)),
    ['a-undecodable', 'b-nan', 'c-null', 'd-no-fields', 'e-huge', 'f-request-id', 'g-time'],
    'each record set aside is an entry: its key and why',
  );
  t.match(setAside[5], { problem: /request_id/ });
  t.notOk(
    setAside.some((e) => JSON.stringify(e).includes('xxxxxxxx')),
    'never what the record held',
  );
  t.same(
    outbox.rejectedRecords().map((r) => r.key.slice(16)),
    ['a-undecodable', 'b-nan', 'c-null', 'd-no-fields', 'e-huge', 'f-request-id', 'g-time'],
    'each damaged record is kept aside for the operator',
  );
  t.same(
    outbox.pending().map((p) => String(p.key).slice(16)),
    ['h-future'],
    'an event of a kind this version does not know still waits',
  );
  const warnings = lines.length;
  await drain.drain();
  await drain.drain();
  t.equal(lines.length, warnings, 'and it is not warned about again at every drain');
  await log.close();
});

t.test("an entry naming a request id that is not the daemon's does not stop the log, now or at the next start", async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  t.teardown(() => store.close());
  let log = AuditLog.open(store, { journalDir: dir });
  const append = appender(log);
  const long = 'x'.repeat(5_000);
  await append('boot', { request_id: long });
  const own = `req_${'a'.repeat(32)}`;
  await append('stream.start', { request_id: own });
  await log.settled();
  t.equal(log.problem, null, 'the log takes entries');
  t.equal(log.findRequest(own), 1, "the daemon's own ids are indexed");
  t.equal(log.findRequest(long), null, 'the long one is not looked up');
  await log.close();
  // A start that indexes the log again (as after a crash replay) meets the long id too.
  store.db('audit-request-ids').removeSync('#covered');
  log = AuditLog.open(store, { journalDir: dir });
  t.equal(log.size, 2, 'the next start reads and indexes the log');
  t.equal(log.findRequest(own), 1);
  await log.close();
});

t.test('a record under a key that is not a string is set aside too; the events behind it are logged', async (t) => {
  const dir = tempDir(t);
  const store = openStore(dir);
  t.teardown(() => store.close());
  const log = AuditLog.open(store, { journalDir: dir });
  // lmdb keys may be numbers or arrays (sorted before every string key): a foreign writer's record.
  const foreign = store.db<unknown, number | string[]>('audit-outbox');
  foreign.putSync(7, { kind: 'project.created' });
  foreign.putSync(['x', 'y'], null);
  const outbox = new AuditOutbox(store);
  outbox.put('project.created', { by: ME, project: 'proj_b', name: 'b' });
  const { logger } = recorder();
  const drain = new OutboxDrain(store, log, appender(log), logger);
  t.equal(await drain.drain(), 1, 'the real event is logged');
  await log.settled();
  const entries = kindsIn(log);
  t.same(
    entries.filter((e) => e.kind === 'outbox.rejected').map((e) => e.outbox_key),
    ['7', 'x,y'],
    'each is an entry naming its key',
  );
  t.same(outbox.pending(), [], 'nothing is left waiting');
  await log.close();
});
