// The batch runner on its own stores, with a scripted caller in place of the daemon's pipeline: refusals of capacity
// or limits are tried again (and, past the tries, are the line's answer), a batch whose completion window ends stops
// and says which lines it never ran, a line's answer is recorded once however often it is handed in, and stopping
// waits for the lines in progress. The in-process credential is good for one call of an active key.
import t, { type Test } from 'tap';
import { InternalCredentials } from '../daemon/auth/index.js';
import { BatchRunner, BatchStore, FileStore, type LineAnswer, type LineCall } from '../daemon/batches/index.js';
import { KeyRegistry } from '../daemon/keys/index.js';
import { openStore } from '../daemon/store/index.js';
import { tempDir } from './helpers/daemon.js';

const quiet = { info() {}, warn() {}, error() {} };

function setup(t: Test) {
  // Real time, which a test may move on.
  const clock = { ahead: 0 };
  const store = openStore(tempDir(t));
  const now = () => Date.now() + clock.ahead;
  const files = new FileStore(store, { ttlMs: 3600_000, maxBytesPerProject: 1 << 30, now });
  const batches = new BatchStore(store, files, now);
  t.teardown(() => store.close());
  const input = async (n: number) =>
    files.create('p', {
      filename: 'in.jsonl',
      purpose: 'batch',
      lines: Array.from({ length: n }, (_, i) =>
        JSON.stringify({ custom_id: `line-${i}`, method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: `text ${i}` } }),
      ),
    });
  const batch = async (n: number, windowMs = 3600_000) => {
    const file = await input(n);
    return batches.create(
      'p',
      'key_1',
      { inputFileId: file.id, lines: n, endpoint: '/v1/embeddings', completionWindow: '24h', metadata: null },
      windowMs,
    );
  };
  const run = (call: (c: LineCall) => Promise<LineAnswer>, parallel = 1) => {
    const runner = new BatchRunner({ batches, files, log: quiet, parallel, now, backoffMs: { min: 5, max: 20 } });
    runner.start(call);
    t.teardown(() => runner.stop(1000));
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
  const content = async (id: string) =>
    ((await files.content('p', id))?.toString() ?? '')
      .trimEnd()
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  return { store, files, batches, batch, run, ended, content, clock };
}

const ok = (c: LineCall): LineAnswer => ({ status: 200, requestId: 'req_x', body: { echo: c.body.input }, retryAfterSeconds: null });

t.test('each line runs as the batch key, with service_tier flex; refusals are tried again', async (t) => {
  const { batch, run, ended, content } = setup(t);
  const record = await batch(5);
  const calls: LineCall[] = [];
  const tries = new Map<unknown, number>();
  run(async (c) => {
    calls.push(c);
    const n = (tries.get(c.body.input) ?? 0) + 1;
    tries.set(c.body.input, n);
    // Every line is refused once for its limit, once for capacity, then answered.
    if (n === 1) return { status: 429, requestId: 'req_r', body: {}, retryAfterSeconds: 0 };
    if (n === 2) return { status: 503, requestId: 'req_r', body: {}, retryAfterSeconds: null };
    return ok(c);
  }, 2);
  const done = await ended(record.id);
  t.equal(done.status, 'completed');
  t.same([done.total, done.completed, done.failed], [5, 5, 0]);
  t.equal(calls.length, 15, 'three tries per line');
  t.ok(
    calls.every((c) => c.keyId === 'key_1' && c.projectId === 'p' && c.url === '/v1/embeddings' && c.body.service_tier === 'flex'),
    'as the key that made the batch, at the flex tier',
  );
  const output = await content(done.outputFileId);
  t.same(
    output.map((l) => l.custom_id),
    ['line-0', 'line-1', 'line-2', 'line-3', 'line-4'],
    'each once, in the order of the input',
  );
  t.same(output[2].response, { status_code: 200, request_id: 'req_x', body: { echo: 'text 2' } });
});

t.test('a line refused every time is answered with its last refusal after ten tries', async (t) => {
  const { batch, run, ended, content } = setup(t);
  const record = await batch(1);
  let calls = 0;
  run(async () => {
    calls++;
    return { status: 503, requestId: `req_${calls}`, body: { error: { code: 'server_overloaded' } }, retryAfterSeconds: null };
  });
  const done = await ended(record.id);
  t.equal(done.status, 'completed');
  t.same([done.completed, done.failed], [0, 1]);
  t.equal(calls, 10);
  const [line] = await content(done.errorFileId);
  t.match(line, { custom_id: 'line-0', response: { status_code: 503, request_id: 'req_10' }, error: null });
});

t.test('a batch whose completion window ends stops: the lines it never ran are in the error file as expired', async (t) => {
  const { batch, run, ended, content, clock } = setup(t);
  const record = await batch(6, 60_000);
  let calls = 0;
  run(async (c) => {
    // The window ends while the third line runs.
    if (++calls === 3) clock.ahead += 61_000;
    return ok(c);
  });
  const done = await ended(record.id);
  t.equal(done.status, 'expired');
  t.type(done.expiredAt, 'number');
  t.same([done.completed, done.failed], [3, 0], 'the line in progress finished and counts');
  const output = await content(done.outputFileId);
  const errors = await content(done.errorFileId);
  t.same(
    output.map((l) => l.custom_id),
    ['line-0', 'line-1', 'line-2'],
  );
  t.same(
    errors.map((l) => [l.custom_id, l.response, l.error.code]),
    [3, 4, 5].map((i) => [`line-${i}`, null, 'batch_expired']),
  );
});

t.test('an answer handed in twice is recorded once', async (t) => {
  const { batches, batch, content } = setup(t);
  const record = await batch(2);
  await batches.answered(record.id, 0, true, '{"first":true}');
  const again = await batches.answered(record.id, 0, false, '{"second":true}');
  t.same([again.completed, again.failed, again.outputLines, again.errorLines], [1, 0, 1, 0]);
  await batches.notRun(record.id, [0, 1], () => '{"not":"run"}');
  const ended = await batches.end(record.id, 'cancelled');
  t.same(await content(ended.outputFileId), [{ first: true }]);
  t.same(await content(ended.errorFileId), [{ not: 'run' }], 'only the line not done is marked not run');
  await batches.forgetLines(record.id);
  const late = await batches.answered(record.id, 1, true, '{"late":true}');
  t.same([late.completed, late.outputLines], [1, 1], 'an answer after the batch ended is not recorded');
  t.same(await content(ended.outputFileId), [{ first: true }]);
});

t.test('stopping waits for the lines in progress and starts no more', async (t) => {
  const { batches, batch, run } = setup(t);
  const record = await batch(4);
  let calls = 0;
  let release: () => void = () => {};
  const held = new Promise<void>((r) => (release = r));
  const runner = run(async (c) => {
    calls++;
    await held;
    return ok(c);
  });
  while (!calls) await new Promise((r) => setTimeout(r, 5));
  const stopped = runner.stop(5_000);
  setTimeout(release, 50);
  await stopped;
  t.equal(calls, 1, 'no line started after stop');
  t.equal(batches.record(record.id)!.completed, 1, 'the line in progress was recorded');
  t.equal(batches.record(record.id)!.status, 'in_progress', 'the batch waits for the next start');
});

t.test('an in-process credential is good for one call of an active key', async (t) => {
  const store = openStore(tempDir(t));
  t.teardown(() => store.close());
  const keys = new KeyRegistry(store);
  await keys.createProject('p');
  const { key } = await keys.createKey({ project: 'p' });
  const credentials = new InternalCredentials(keys);
  const token = credentials.issue(key.id, key.project);
  t.match(credentials.redeem(token), { keyId: key.id, projectId: key.project });
  t.throws(() => credentials.redeem(token), { code: 'invalid_api_key' }, 'spent once redeemed');
  t.throws(() => credentials.redeem('made-up'), { code: 'invalid_api_key' }, 'an unknown one is refused');
  t.throws(
    () => credentials.redeem(credentials.issue(key.id, 'another-project')),
    { code: 'invalid_api_key' },
    'for the key’s own project only',
  );
  const later = credentials.issue(key.id, key.project);
  await keys.revokeKey(key.id);
  t.throws(() => credentials.redeem(later), /revoked/, 'a revoked key’s calls are refused');
});
