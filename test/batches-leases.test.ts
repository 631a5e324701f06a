// Batch leases (daemon/batches/leases.ts) with runners standing for replicas, on one store and with short times: a
// batch is run by one runner only; a lease that runs out (its replica killed) is taken over and the lines not done
// run, each recorded once; a replica that comes back takes its own batches at once; a busy replica leaves a new batch
// to an idle one; a runner that stops lets its leases go. test/scale-out-batches.test.ts runs the same on replicas
// sharing PostgreSQL.
import t, { type Test } from 'tap';
import { BatchLeases, BatchRunner, BatchStore, FileStore, type LineAnswer, type LineCall } from '../daemon/batches/index.js';
import type { LeaseOptions } from '../daemon/batches/leases.js';
import { openStore } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';

const TIMES = { leaseMs: 600, renewMs: 200, lookMs: 50, takeWhenBusyMs: 5_000 };

function setup(t: Test) {
  const store = openStore(tempDir(t));
  const files = new FileStore(store, { ttlMs: 3600_000, maxBytesPerProject: 1 << 30 });
  const batches = new BatchStore(store, files);
  const runners: BatchRunner[] = [];
  // The runners first: they read the store until they stop.
  t.teardown(async () => {
    await Promise.all(runners.map((r) => r.stop(1000)));
    await store.close();
  });
  const batch = async (n: number, prefix = 'line') => {
    const file = await files.create('p', {
      filename: 'in.jsonl',
      purpose: 'batch',
      lines: Array.from({ length: n }, (_, i) =>
        JSON.stringify({
          custom_id: `${prefix}-${i}`,
          method: 'POST',
          url: '/v1/embeddings',
          body: { model: 'm', input: `${prefix} ${i}` },
        }),
      ),
    });
    return batches.create(
      'p',
      'key_1',
      { inputFileId: file.id, lines: n, endpoint: '/v1/embeddings', completionWindow: '24h', metadata: null },
      3600_000,
    );
  };
  const logs: Array<{ replica: string; message: string; fields: object }> = [];
  const leases = (holder: string, times: LeaseOptions = TIMES) => new BatchLeases(store, { holder, ...times });
  /** A runner as replica `holder` would run it; `calls` hears of each line it runs. */
  const replica = (
    holder: string,
    call: (c: LineCall) => Promise<LineAnswer>,
    options: { parallel?: number; times?: LeaseOptions } = {},
  ) => {
    const log = (message: string, fields: object) => logs.push({ replica: holder, message, fields });
    const runner = new BatchRunner({
      batches,
      files,
      log: { info: (f, m) => log(m, f), warn: (f, m) => log(m, f), error: (f, m) => log(m, f) },
      parallel: options.parallel ?? 2,
      backoffMs: { min: 5, max: 20 },
      leases: leases(holder, options.times),
    });
    runner.start(call);
    runners.push(runner);
    return runner;
  };
  const ended = async (id: string, ms = 10_000) => {
    const until = Date.now() + ms;
    for (;;) {
      const record = batches.record(id)!;
      if (['completed', 'failed', 'expired', 'cancelled'].includes(record.status)) return record;
      if (Date.now() > until) throw new Error(`batch still ${record.status}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const customIds = async (id: string) =>
    ((await files.content('p', id))?.toString() ?? '')
      .trimEnd()
      .split('\n')
      .filter(Boolean)
      .map((l) => (JSON.parse(l) as { custom_id: string }).custom_id);
  return { store, batches, batch, leases, replica, ended, customIds, logs };
}

/** A caller that answers at once, noting which replica ran which line. */
const recording = (replica: string, ran: Array<{ replica: string; input: unknown; at: number }>) => async (c: LineCall) => {
  ran.push({ replica, input: c.body.input, at: Date.now() });
  await new Promise((r) => setTimeout(r, 2));
  return { status: 200, requestId: `req_${replica}`, body: { input: c.body.input }, retryAfterSeconds: null } satisfies LineAnswer;
};

const once = (ids: string[], n: number, prefix = 'line') =>
  ids.length === n && new Set(ids).size === n && ids.every((id) => id.startsWith(`${prefix}-`));

t.test('a batch is run by one replica: every line once, all by the holder of its lease', async (t) => {
  const { batch, replica, ended, customIds } = setup(t);
  const ran: Array<{ replica: string; input: unknown; at: number }> = [];
  replica('a', recording('a', ran));
  replica('b', recording('b', ran));
  const record = await batch(12);
  const done = await ended(record.id);
  t.equal(done.status, 'completed');
  t.equal(ran.length, 12, 'each line ran once');
  t.equal(new Set(ran.map((r) => r.replica)).size, 1, `all on one replica (${ran[0]?.replica})`);
  t.ok(once(await customIds(done.outputFileId), 12), 'every custom_id once in the output');
});

t.test('a lease that runs out (its replica killed) is taken over: the lines not done run, each recorded once', async (t) => {
  const { batches, batch, leases, replica, ended, customIds, logs } = setup(t);
  const record = await batch(8);
  // The dead replica took the batch and answered its first three lines, then was killed (its lease is never renewed).
  const [dead] = [...(await leases('dead').hold([record.id])).values()];
  for (let i = 0; i < 3; i++) await batches.answered(record.id, i, true, JSON.stringify({ custom_id: `line-${i}` }));
  const ran: Array<{ replica: string; input: unknown; at: number }> = [];
  replica('b', recording('b', ran));
  const done = await ended(record.id);
  t.equal(done.status, 'completed');
  t.ok(ran[0].at >= dead.until, `no line ran before the lease ran out (${ran[0].at - dead.until} ms after)`);
  t.same(
    ran.map((r) => r.input),
    [3, 4, 5, 6, 7].map((i) => `line ${i}`),
    'only the lines not done ran',
  );
  t.ok(once(await customIds(done.outputFileId), 8), 'every custom_id once in the output');
  t.ok(
    logs.some((l) => l.replica === 'b' && l.message.startsWith('batch taken over') && (l.fields as { from?: string }).from === 'dead'),
    'the replica that took it over says so',
  );
});

t.test('a replica that comes back takes its own batches at once; no other takes them meanwhile', async (t) => {
  const { batch, leases, replica, ended, logs } = setup(t);
  const record = await batch(4);
  // Held by replica a before it was killed, for longer than this test.
  await leases('a', { ...TIMES, leaseMs: 60_000 }).hold([record.id]);
  const ran: Array<{ replica: string; input: unknown; at: number }> = [];
  replica('b', recording('b', ran));
  await new Promise((r) => setTimeout(r, 300));
  t.equal(ran.length, 0, 'another replica leaves it to its holder');
  replica('a', recording('a', ran));
  const done = await ended(record.id, 2_000);
  t.equal(done.status, 'completed');
  t.ok(
    ran.every((r) => r.replica === 'a'),
    'run by the replica that came back',
  );
  t.ok(
    logs.some((l) => l.replica === 'a' && l.message === 'batches resumed'),
    'which says it resumed it',
  );
});

t.test('a replica whose workers are busy leaves a new batch to an idle one', async (t) => {
  const { batch, replica, ended } = setup(t);
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  let entered: () => void = () => {};
  const running = new Promise<void>((r) => (entered = r));
  const ran: Array<{ replica: string; input: unknown; at: number }> = [];
  const answer = recording('a', ran);
  replica(
    'a',
    async (c) => {
      entered();
      await held;
      return answer(c);
    },
    { parallel: 1 },
  );
  const first = await batch(3, 'first');
  // Replica a runs the first batch's first line, and holds it: its one worker is busy.
  await running;
  replica('b', recording('b', ran));
  const second = await batch(3, 'second');
  const done = await ended(second.id, 3_000);
  t.equal(done.status, 'completed');
  t.same(
    ran.filter((r) => String(r.input).startsWith('second')).map((r) => r.replica),
    ['b', 'b', 'b'],
    'the second batch ran on the idle replica',
  );
  release();
  t.equal((await ended(first.id)).status, 'completed');
  t.ok(
    ran.filter((r) => String(r.input).startsWith('first')).every((r) => r.replica === 'a'),
    'the first on the busy one',
  );
});

t.test('a runner that stops lets its leases go: another takes the batch at once, and runs the line it left', async (t) => {
  const { batch, replica, ended, customIds } = setup(t);
  const times = { ...TIMES, leaseMs: 60_000 };
  const record = await batch(5);
  const ran: Array<{ replica: string; input: unknown; at: number }> = [];
  let started: () => void = () => {};
  const running = new Promise<void>((r) => (started = r));
  const stuck = replica(
    'a',
    async (c) => {
      ran.push({ replica: 'a', input: c.body.input, at: Date.now() });
      started();
      return new Promise<LineAnswer>(() => {});
    },
    { parallel: 1, times },
  );
  await running;
  await stuck.stop(50);
  replica('b', recording('b', ran), { times });
  const done = await ended(record.id, 3_000);
  t.equal(done.status, 'completed', 'completed long before the lease would have run out');
  t.same(
    ran.filter((r) => r.replica === 'b').map((r) => r.input),
    [0, 1, 2, 3, 4].map((i) => `line ${i}`),
    'the line left running on the stopped replica ran again',
  );
  t.ok(once(await customIds(done.outputFileId), 5), 'every custom_id once in the output');
});
