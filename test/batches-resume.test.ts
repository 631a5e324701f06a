// A batch outlives its daemon: killed with SIGKILL in the middle of a batch and started again on the same data
// directory, the daemon resumes it, and the output holds every custom_id exactly once; the audit log verifies, with an
// entry for every line run (a line running when the process died runs again, and has an entry for each run that
// finished). A batch cancelled while it runs ends cancelled, its output holding the lines that finished.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { makeModelFixtures } from './fixtures/models.js';
import { cli, createKey, startDaemon, tempDir, waitForModels, type RunningDaemon } from './helpers/daemon.js';

const LINES = 40;
const ROUTE = '/v1/chat/completions';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = join(dir, 'data');
const key = createKey(dataDir);

const start = async () => {
  const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
  await waitForModels(daemon.baseURL, key.secret, ['tiny-chat']);
  return { daemon, client: new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 }) };
};

/** Lines long enough that a batch of them runs for a few seconds on the tiny model. */
function input(prefix: string): Buffer {
  const lines = Array.from({ length: LINES }, (_, i) => ({
    custom_id: `${prefix}-${i}`,
    method: 'POST',
    url: ROUTE,
    body: { model: 'tiny-chat', messages: [{ role: 'user', content: `Tell me a long story, number ${i}.` }], max_tokens: 160, seed: i },
  }));
  return Buffer.from(lines.map((l) => JSON.stringify(l)).join('\n') + '\n');
}

async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const ended = (client: OpenAI, id: string) =>
  until(`batch ${id} ends`, 50_000, async () => {
    const batch = await client.batches.retrieve(id);
    return ['completed', 'failed', 'expired', 'cancelled'].includes(batch.status) ? batch : undefined;
  });

async function fileLines(client: OpenAI, id: string | null | undefined): Promise<any[]> {
  if (!id) return [];
  const text = await (await client.files.content(id)).text();
  return text
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
}

const count = <T>(items: T[]) => items.reduce((m, i) => m.set(i, (m.get(i) ?? 0) + 1), new Map<T, number>());

let daemon: RunningDaemon;
let client: OpenAI;

t.test('killed with SIGKILL mid-batch, restarted: the batch completes, every custom_id exactly once', async (t) => {
  ({ daemon, client } = await start());
  const file = await client.files.create({ file: await toFile(input('story'), 'stories.jsonl'), purpose: 'batch' });
  const created = await client.batches.create({ input_file_id: file.id, endpoint: ROUTE, completion_window: '24h' });
  const started = Date.now();
  const before = await until('some lines are done', 30_000, async () => {
    const batch = await client.batches.retrieve(created.id);
    return batch.request_counts!.completed >= 3 ? batch : undefined;
  });
  t.equal(before.status, 'in_progress');
  t.ok(before.request_counts!.completed < LINES, `killed part way (${before.request_counts!.completed} of ${LINES} done)`);
  process.kill(daemon.proc.pid!, 'SIGKILL');
  await daemon.exited;
  t.comment(`killed after ${Date.now() - started} ms`);

  ({ daemon, client } = await start());
  t.ok(await daemon.logged((l) => l.includes('"batches resumed"') && l.includes(created.id)), 'the daemon says it resumed the batch');
  const batch = await ended(client, created.id);
  t.equal(batch.status, 'completed');
  t.same(batch.request_counts, { total: LINES, completed: LINES, failed: 0 });
  t.equal(batch.error_file_id, null, 'no error file');
  const output = await fileLines(client, batch.output_file_id);
  const ids = count(output.map((l) => l.custom_id as string));
  t.equal(ids.size, LINES, 'every custom_id is there');
  t.ok(
    [...ids.values()].every((n) => n === 1),
    'each exactly once',
  );
  t.ok(
    output.every((l) => l.response.status_code === 200 && l.response.body.object === 'chat.completion'),
    'each a chat completion',
  );
  const progress = daemon.logs.filter((l) => l.includes('"batch progress"') || l.includes('"batch ended"'));
  t.ok(progress.length, 'progress is logged');
  t.notOk(
    daemon.logs.some((l) => l.includes('long story')),
    'no prompt text in the logs',
  );
  (t.context as { output: any[] }).output = output;
  await daemon.stop();

  const out = join(dir, 'export');
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', out]).code, 0);
  const entries = readFileSync(join(out, 'entries.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
  const lineEntries = entries.filter((e) => e.kind === 'call' && e.route === ROUTE);
  t.ok(
    lineEntries.every((e) => e.key === key.id),
    'each as the key that made the batch',
  );
  // Refusals while the restarted daemon's model was loading (503 model_not_ready) are calls too, tried again.
  const refused = lineEntries.filter((e) => e.status === 503);
  t.ok(
    refused.every((e) => e.model === 'tiny-chat'),
    `${refused.length} refused while the model loaded`,
  );
  const answered = lineEntries.filter((e) => e.status === 200);
  const byRequest = count(answered.map((e) => e.request_id as string));
  t.ok(
    output.every((l) => byRequest.get(l.response.request_id) === 1),
    'every answer in the output has its own audit entry',
  );
  // A line whose run finished (and was logged) just before the kill, but was not recorded, ran again: at most one
  // more run than lines per line that was running.
  t.ok(answered.length >= LINES && answered.length <= LINES + 1, `one entry per line run (${answered.length} for ${LINES} lines)`);
  t.equal(answered.length + refused.length, lineEntries.length, 'no other entries');
  const verified = cli(['audit', 'verify', '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software' });
  t.equal(verified.code, 0, verified.stdout + verified.stderr);
});

t.test('cancelled mid-batch: cancelled, the output holds the lines that finished, the rest say they were not run', async (t) => {
  ({ daemon, client } = await start());
  const file = await client.files.create({ file: await toFile(input('cancel'), 'stories.jsonl'), purpose: 'batch' });
  const created = await client.batches.create({ input_file_id: file.id, endpoint: ROUTE, completion_window: '24h' });
  await until('some lines are done', 30_000, async () => {
    const batch = await client.batches.retrieve(created.id);
    return batch.request_counts!.completed >= 2 ? batch : undefined;
  });
  // The batch runs in the room interactive calls leave: an interactive call is served meanwhile.
  const interactive = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 4,
  });
  t.equal(interactive.service_tier, 'default', 'an interactive call is served while the batch runs');
  t.equal((await client.batches.retrieve(created.id)).status, 'in_progress');
  const inUse = await client.files.delete(file.id).catch((e: unknown) => e);
  t.ok(inUse instanceof OpenAI.ConflictError, 'the input of a running batch cannot be deleted');
  t.match((inUse as Error).message, /Cancel the batch/);
  const cancelling = await client.batches.cancel(created.id);
  t.ok(['cancelling', 'cancelled'].includes(cancelling.status), cancelling.status);
  t.type(cancelling.cancelling_at, 'number');
  const batch = await ended(client, created.id);
  t.equal(batch.status, 'cancelled');
  t.type(batch.cancelled_at, 'number');
  const done = batch.request_counts!.completed;
  t.ok(done >= 2 && done < LINES, `${done} lines finished`);
  const output = await fileLines(client, batch.output_file_id);
  const errors = await fileLines(client, batch.error_file_id);
  t.equal(output.length, done, 'the output holds the lines that finished');
  t.ok(
    output.every((l) => l.response.status_code === 200),
    'each answered',
  );
  t.equal(errors.length, LINES - done, 'the error file holds the others');
  t.ok(
    errors.every((l) => l.response === null && l.error.code === 'batch_cancelled'),
    'each saying it was not run',
  );
  const ids = count([...output, ...errors].map((l) => l.custom_id as string));
  t.ok(ids.size === LINES && [...ids.values()].every((n) => n === 1), 'every custom_id once across both');
  const again = await client.batches.cancel(created.id);
  t.equal(again.status, 'cancelled', 'cancelling it again changes nothing');
  const deleted = await client.files.delete(file.id);
  t.ok(deleted.deleted, 'its input can be deleted once it has ended');
});
