// What one project's batches may hold at once: batches.maxOpenPerProject unfinished batches (the next, even sent at the
// same moment as others, is 429 with Retry-After, and another project is not held back), and no batch at all while the
// project's files fill its room (files.maxBytesPerProject): a batch's output is written whatever room is left, so these
// two bound what a project's batches can write.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';

const ROOM = 4_000_000;
const dataDir = tempDir(t);
const config = join(dataDir, 'config.json');
writeFileSync(config, JSON.stringify({ files: { maxBytesPerProject: ROOM }, batches: { maxOpenPerProject: 2 } }));
const key = createKey(dataDir);
const other = createKey(dataDir, 'other-team');
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const otherClient = new OpenAI({ apiKey: other.secret, baseURL: daemon.baseURL, maxRetries: 0 });

/** An input of `n` lines for a model this daemon does not have: each line is answered at once, with a 404. */
const input = (n: number, pad = 0) =>
  Buffer.from(
    Array.from({ length: n }, (_, i) =>
      JSON.stringify({ custom_id: `l-${i}`, method: 'POST', url: '/v1/embeddings', body: { model: 'absent', input: 'x'.repeat(pad + 1) } }),
    ).join('\n'),
  );
const upload = async (bytes: Buffer, as = client) => as.files.create({ file: await toFile(bytes, 'in.jsonl'), purpose: 'batch' });
const create = (fileId: string, as = client) =>
  as.batches.create({ input_file_id: fileId, endpoint: '/v1/embeddings', completion_window: '24h' }).then(
    (batch) => ({ batch, error: null }),
    (error: InstanceType<typeof OpenAI.APIError>) => ({ batch: null, error }),
  );

/**
 * Cancels a batch and waits (at most ten seconds) until it has ended; deletes its output and error files (a line for
 * each line not run), which take room the next batch needs. Its status at the end.
 */
async function cancelled(id: string): Promise<string> {
  await client.batches.cancel(id);
  let batch = await client.batches.retrieve(id);
  for (let i = 0; i < 200 && batch.status !== 'cancelled'; i++) {
    await new Promise((r) => setTimeout(r, 50));
    batch = await client.batches.retrieve(id);
  }
  for (const file of [batch.output_file_id, batch.error_file_id]) if (file) await client.files.delete(file);
  return batch.status;
}

t.test('batches.maxOpenPerProject: the next batch is 429, even among batches sent at once; ended ones do not count', async (t) => {
  // Long enough that none ends while the others are created.
  const file = await upload(input(12_000));
  const results = await Promise.all([create(file.id), create(file.id), create(file.id), create(file.id)]);
  const made = results.filter((r) => r.batch);
  const refused = results.filter((r) => r.error);
  t.equal(made.length, 2, 'two batches made');
  t.equal(refused.length, 2, 'the others refused');
  for (const { error } of refused) {
    t.equal(error?.status, 429);
    t.match(error?.message, /2 batches that have not ended.*batches\.maxOpenPerProject.*cancel one/);
    t.equal(error?.headers?.get('retry-after'), '60');
  }
  const otherFile = await upload(input(3), otherClient);
  t.ok((await create(otherFile.id, otherClient)).batch, "another project's batch is not held back");

  for (const { batch } of made) t.equal(await cancelled(batch!.id), 'cancelled');
  const again = await create(file.id);
  t.ok(again.batch, `once they have ended, a batch is made again ${again.error?.message ?? ''}`);
  if (again.batch) await cancelled(again.batch.id);
  t.equal((await create(otherFile.id, otherClient)).batch?.status, 'validating', 'and another project still makes its own');
});

t.test('no batch while the room its project has left is less than its input', async (t) => {
  for await (const f of await client.files.list()) await client.files.delete(f.id);
  const small = await upload(input(2));
  // One file fills the room but for half the small input's size. A file is stored as its lines scrubbed, so its size
  // is measured once with its last line's padding empty; the padding then grows it byte for byte.
  const body = input(3500, 1000);
  const filler = (padding: number) =>
    Buffer.concat([
      body,
      Buffer.from(
        '\n' +
          JSON.stringify({
            custom_id: 'last',
            method: 'POST',
            url: '/v1/embeddings',
            body: { model: 'absent', input: 'y'.repeat(padding) },
          }),
      ),
    ]);
  const measured = await upload(filler(1));
  await client.files.delete(measured.id);
  const padding = 1 + ROOM - small.bytes - Math.floor(small.bytes / 2) - measured.bytes;
  t.ok(padding > 1, `${padding} bytes of padding`);
  const fill = await upload(filler(padding));
  t.equal(fill.bytes + small.bytes, ROOM - Math.floor(small.bytes / 2), 'the room left is half the small input');
  const full = await create(small.id);
  if (full.batch) {
    t.fail(`a batch was made with ${(await client.files.list()).data.reduce((n, f) => n + f.bytes, 0)} bytes held`);
    return;
  }
  t.equal(full.error?.status, 413);
  t.match(full.error?.message, /already hold \d+ of the 4000000 bytes.*files\.maxBytesPerProject.*input of \d+ bytes.*no room/);
  await client.files.delete(fill.id);
  t.ok((await create(small.id)).batch, 'with room again, the batch is made');
});
