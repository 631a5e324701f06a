// The Batch API on replicas that share their state in PostgreSQL (store: "postgres"): a real PostgreSQL 15 and two
// cloud replicas serving the tiny real models, all on loopback, through the openai client. A file uploaded through one
// replica is listed and read through the other; a batch made through one is run by exactly one replica (each line
// billed once) and its output is read through the other; when the replica that runs a batch is killed (SIGKILL), the
// other takes the batch over once its lease runs out and completes it, every custom_id once in the output; a batch
// cancelled through the replica that does not run it stops.
import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { Agent } from 'undici';
import { LEASE_MS } from '../daemon/batches/index.js';
import { makeModelFixtures } from './fixtures/models.js';
import { writeReplicaConfig } from './helpers/cluster.js';
import { cli, startDaemon, tempDir, type RunningDaemon } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { startPostgres } from './helpers/postgres.js';
import { selfSignedCert } from './helpers/tls.js';

const ROUTE = '/v1/chat/completions';
const root = t;
const dir = tempDir(t);
const tls = selfSignedCert(dir);
const fixtures = makeModelFixtures(dir);
const pg = await startPostgres(t);

const configFor = (name: 'a' | 'b') =>
  writeReplicaConfig(dir, name, { tls, postgres: { url: pg.url, passwordFile: pg.passwordFile, timeoutMs: 1000 } });
const configs = { a: configFor('a'), b: configFor('b') };
const migrated = cli(['db', 'migrate', '--config', configs.a]);
if (migrated.code !== 0) throw new Error(migrated.stderr);
if (cli(['projects', 'create', 'ministry', '--config', configs.a]).code !== 0) throw new Error('projects create failed');
/** A key of its own for each test: its usage is that test's calls only. */
const newKey = (): { id: string; secret: string } => {
  const made = cli(['keys', 'create', '--project', 'ministry', '--config', configs.a, '--json']);
  if (made.code !== 0) throw new Error(made.stderr);
  return made.json as { id: string; secret: string };
};

const agent = new Agent({ connect: { ca: tls.ca } });
t.teardown(() => agent.close());
const clientOf = (replica: RunningDaemon, secret: string) =>
  new OpenAI({
    apiKey: secret,
    baseURL: replica.baseURL,
    maxRetries: 0,
    // Node's own fetch, which sends the global FormData (uploads), through an agent that trusts the test's certificate.
    fetch: ((url: string, init: RequestInit) => fetch(url, { ...init, dispatcher: agent } as unknown as RequestInit)) as typeof fetch,
  });

const replicas = {} as Record<'a' | 'b', RunningDaemon>;
/** Starts a replica (stopped at the file's end) and waits for its chat model. */
async function start(name: 'a' | 'b', secret: string): Promise<RunningDaemon> {
  const replica = await startDaemon(root, ['--config', configs[name], ...fixtures.args]);
  for (const until = Date.now() + 30_000; ;) {
    const health = await request(`${replica.baseURL}/health`, { headers: { authorization: `Bearer ${secret}` }, ca: tls.ca });
    const models = (health.json?.models ?? []) as Array<{ id: string; readiness: string }>;
    if (models.some((m) => m.id === 'tiny-chat' && m.readiness === 'ready')) break;
    if (Date.now() > until) throw new Error(`replica ${name}'s model is not ready: ${health.text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  replicas[name] = replica;
  return replica;
}

const input = (prefix: string, n: number, maxTokens: number) =>
  Buffer.from(
    Array.from({ length: n }, (_, i) =>
      JSON.stringify({
        custom_id: `${prefix}-${i}`,
        method: 'POST',
        url: ROUTE,
        body: {
          model: 'tiny-chat',
          messages: [{ role: 'user', content: `Tell me a story, number ${i}.` }],
          max_tokens: maxTokens,
          seed: i,
        },
      }),
    ).join('\n') + '\n',
  );

async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const ended = (client: OpenAI, id: string, ms = 45_000) =>
  until(`batch ${id} ends`, ms, async () => {
    const batch = await client.batches.retrieve(id);
    return ['completed', 'failed', 'expired', 'cancelled'].includes(batch.status) ? batch : undefined;
  });

async function fileLines(client: OpenAI, id: string | null | undefined): Promise<Array<Record<string, any>>> {
  if (!id) return [];
  const text = await (await client.files.content(id)).text();
  return text
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, any>);
}

/** The replicas whose log says they started running the batch (its first line), or took it over. */
const runners = (id: string, what = '"batch started"') =>
  (['a', 'b'] as const).filter((name) => replicas[name].logs.some((l) => l.includes(what) && l.includes(id)));

/** The key's batch lines billed today, as `sovereign usage export` reads them from PostgreSQL. */
function billed(keyId: string): number {
  const r = cli(['usage', 'export', '--config', configs.b, '--format', 'jsonl']);
  if (r.code !== 0) throw new Error(r.stderr);
  return r.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { key: string; endpoint: string; requests: number })
    .filter((row) => row.key === keyId && row.endpoint === ROUTE)
    .reduce((sum, row) => sum + row.requests, 0);
}

const first = newKey();
await start('a', first.secret);
await start('b', first.secret);

t.test('a file uploaded through one replica is read, listed and used through the other', async (t) => {
  const [a, b] = [clientOf(replicas.a, first.secret), clientOf(replicas.b, first.secret)];
  const file = await a.files.create({ file: await toFile(input('file', 3, 4), 'stories.jsonl'), purpose: 'batch' });
  // At once: the other replica looks it up again after catching up if its copy has not got it yet.
  t.same(await b.files.retrieve(file.id), file, 'retrieved through the other replica');
  const content = await (await b.files.content(file.id)).text();
  t.equal(Buffer.byteLength(content), file.bytes, 'its content read there');
  t.same(
    content
      .trimEnd()
      .split('\n')
      .map((l) => (JSON.parse(l) as { custom_id: string }).custom_id),
    ['file-0', 'file-1', 'file-2'],
  );
  t.ok(
    (await b.files.list()).data.some((f) => f.id === file.id),
    'listed there',
  );
  await b.files.delete(file.id);
  const gone = await a.files.retrieve(file.id).catch((e: unknown) => e);
  t.ok(gone instanceof OpenAI.NotFoundError, 'deleted through the other replica, it is gone through the first');
});

t.test('a batch made through one replica runs on exactly one, and its output is read through the other', async (t) => {
  const key = newKey();
  const [a, b] = [clientOf(replicas.a, key.secret), clientOf(replicas.b, key.secret)];
  const LINES = 6;
  const file = await a.files.create({ file: await toFile(input('once', LINES, 8), 'stories.jsonl'), purpose: 'batch' });
  // Made through the other replica right after the upload: the input is looked up again there.
  const created = await b.batches.create({ input_file_id: file.id, endpoint: ROUTE, completion_window: '24h' });
  t.equal((await a.batches.retrieve(created.id)).id, created.id, 'retrieved at once through the first replica');
  const batch = await ended(a, created.id);
  t.equal(batch.status, 'completed');
  t.same(batch.request_counts, { total: LINES, completed: LINES, failed: 0 });
  t.equal(runners(created.id).length, 1, `run by one replica (${runners(created.id).join(', ')})`);
  const output = await fileLines(b, batch.output_file_id);
  t.same(output.map((l) => l.custom_id).sort(), Array.from({ length: LINES }, (_, i) => `once-${i}`).sort(), 'every custom_id once');
  t.ok(
    output.every((l) => l.response.status_code === 200),
    'each answered',
  );
  // Each replica adds its usage every few seconds: every line billed once, none twice.
  let lines = 0;
  for (const end = Date.now() + 15_000; Date.now() < end && lines < LINES;) {
    await new Promise((r) => setTimeout(r, 500));
    lines = billed(key.id);
  }
  t.equal(lines, LINES, 'each line ran once');
});

t.test('the replica that runs a batch is killed: the other takes it over once the lease runs out, and completes it', async (t) => {
  const key = newKey();
  const LINES = 30;
  const a = clientOf(replicas.a, key.secret);
  const file = await a.files.create({ file: await toFile(input('kill', LINES, 160), 'stories.jsonl'), purpose: 'batch' });
  const created = await a.batches.create({ input_file_id: file.id, endpoint: ROUTE, completion_window: '24h' });
  const before = await until('some lines are done', 30_000, async () => {
    const batch = await a.batches.retrieve(created.id);
    return batch.request_counts!.completed >= 3 ? batch : undefined;
  });
  t.ok(before.request_counts!.completed < LINES, `killed part way (${before.request_counts!.completed} of ${LINES} done)`);
  const [holder] = runners(created.id);
  const other = holder === 'a' ? 'b' : 'a';
  t.ok(holder, `replica ${holder} runs it`);
  process.kill(replicas[holder].proc.pid!, 'SIGKILL');
  await replicas[holder].exited;
  const killedAt = Date.now();
  const survivor = clientOf(replicas[other], key.secret);
  await until('the other replica takes the batch over', LEASE_MS + 5_000, async () =>
    runners(created.id, '"batch taken over').includes(other) ? true : undefined,
  );
  const tookMs = Date.now() - killedAt;
  t.comment(`taken over ${tookMs} ms after the kill`);
  t.ok(tookMs <= LEASE_MS + 2_000, `within the lease and a look (${tookMs} ms)`);
  const batch = await ended(survivor, created.id, 60_000);
  t.equal(batch.status, 'completed');
  t.same(batch.request_counts, { total: LINES, completed: LINES, failed: 0 });
  const output = await fileLines(survivor, batch.output_file_id);
  const ids = output.map((l) => l.custom_id as string);
  t.equal(ids.length, LINES, 'one output line a line');
  t.equal(new Set(ids).size, LINES, 'every custom_id once (a line running on the killed replica ran again, recorded once)');
  // The killed replica comes back for the next test.
  await start(holder, key.secret);
});

t.test('a batch cancelled through the replica that does not run it stops', async (t) => {
  const key = newKey();
  const LINES = 30;
  const a = clientOf(replicas.a, key.secret);
  const file = await a.files.create({ file: await toFile(input('cancel', LINES, 160), 'stories.jsonl'), purpose: 'batch' });
  const created = await a.batches.create({ input_file_id: file.id, endpoint: ROUTE, completion_window: '24h' });
  await until('some lines are done', 30_000, async () => {
    const batch = await a.batches.retrieve(created.id);
    return batch.request_counts!.completed >= 2 ? batch : undefined;
  });
  const [holder] = runners(created.id);
  const other = holder === 'a' ? 'b' : 'a';
  const cancelling = await clientOf(replicas[other], key.secret).batches.cancel(created.id);
  t.ok(['cancelling', 'cancelled'].includes(cancelling.status), `cancelled through replica ${other}: ${cancelling.status}`);
  const batch = await ended(a, created.id, 15_000);
  t.equal(batch.status, 'cancelled', `replica ${holder} stopped it`);
  const done = batch.request_counts!.completed;
  t.ok(done < LINES, `${done} of ${LINES} lines ran`);
  const output = await fileLines(a, batch.output_file_id);
  const errors = await fileLines(a, batch.error_file_id);
  t.equal(output.length, done, 'the output holds the lines that ran');
  t.ok(
    errors.length === LINES - done && errors.every((l) => l.error.code === 'batch_cancelled'),
    'the error file the others, each saying it was not run',
  );
});
