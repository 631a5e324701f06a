// The Batch API's files against their limits, on a daemon whose config makes them small: a project's room
// (files.maxBytesPerProject) refused with a 413 that says what to do, a file larger than files.maxBytes, expiry
// (files.ttlSeconds: gone, and its room given back), listing, and the in-process credential's header refused from the
// network.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';

const dataDir = tempDir(t);
const config = join(dataDir, 'config.json');
writeFileSync(config, JSON.stringify({ files: { maxBytes: 3000, maxBytesPerProject: 3500, ttlSeconds: 3 }, batches: { maxLines: 20 } }));
const key = createKey(dataDir);
const other = createKey(dataDir, 'other-team');
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--config', config]);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const otherClient = new OpenAI({ apiKey: other.secret, baseURL: daemon.baseURL, maxRetries: 0 });

/** A valid input of `n` embeddings lines, about 100 bytes each. */
const input = (n: number, prefix = 'l') =>
  Buffer.from(
    Array.from({ length: n }, (_, i) =>
      JSON.stringify({
        custom_id: `${prefix}-${i}`,
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: 'tiny-embed', input: 'some text' },
      }),
    ).join('\n'),
  );
const upload = async (bytes: Buffer, as = client) => as.files.create({ file: await toFile(bytes, 'in.jsonl'), purpose: 'batch' });
const failure = async (call: Promise<unknown>) =>
  (await call.then(
    () => null,
    (e: unknown) => e,
  )) as InstanceType<typeof OpenAI.APIError> | null;

t.test(
  "a project's room: an upload past it is 413, saying how much is held and what to do; another project is not held back",
  async (t) => {
    const first = await upload(input(18));
    t.ok(first.bytes > 1500 && first.bytes < 2500, `${first.bytes} bytes`);
    const second = await upload(input(18, 'm')).catch((e: unknown) => e);
    t.ok(second instanceof OpenAI.APIError && second.status === 413, 'refused');
    t.match((second as Error).message, /already hold \d+ of the 3500 bytes it may keep \(files.maxBytesPerProject\).*Delete files/);
    t.ok(await upload(input(18), otherClient), "another project's room is its own");
    await client.files.delete(first.id);
    t.ok(await upload(input(18, 'm')), 'room is given back when a file is deleted');
  },
);

t.test('a file larger than files.maxBytes is 413; more lines than batches.maxLines is 400', async (t) => {
  const big = await failure(upload(Buffer.concat([input(10), Buffer.from('\n'), input(30, 'x')])));
  t.equal(big?.status, 413);
  t.match(big?.message, /larger than 3000 bytes \(files.maxBytes\)/);
  const many = Buffer.from(
    Array.from({ length: 21 }, (_, i) =>
      JSON.stringify({ custom_id: `${i}`, method: 'POST', url: '/v1/embeddings', body: { model: 'e', input: 'x' } }),
    ).join('\n'),
  );
  const tooMany = await failure(upload(many, otherClient));
  t.equal(tooMany?.status, 400);
  t.match(tooMany?.message, /more than 20 requests \(batches.maxLines\).*line 21/);
});

t.test('an expired file is gone: not listed, not served, its room given back', async (t) => {
  // The room holds what the first test left: wait for it to expire too.
  await new Promise((r) => setTimeout(r, 3200));
  const file = await upload(input(18, 'n'));
  t.ok(
    (await client.files.list()).data.some((f) => f.id === file.id),
    'listed',
  );
  t.equal(file.expires_at! - file.created_at, 3, 'it expires after files.ttlSeconds');
  await new Promise((r) => setTimeout(r, 3200));
  t.equal((await failure(client.files.retrieve(file.id)))?.status, 404, 'retrieve: 404');
  t.equal((await failure(client.files.content(file.id)))?.status, 404, 'content: 404');
  t.notOk(
    (await client.files.list()).data.some((f) => f.id === file.id),
    'not listed',
  );
  const batch = await failure(client.batches.create({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }));
  t.equal(batch?.status, 404, 'no batch of it');
  t.ok(await upload(input(18, 'o')), 'its room is given back');
});

t.test('files are listed newest first, by purpose, in pages', async (t) => {
  const made = [await upload(input(2, 'a'), otherClient), await upload(input(2, 'b'), otherClient)];
  const page = await otherClient.files.list({ limit: 1 });
  t.equal(page.data.length, 1);
  t.equal(page.data[0].id, made[1].id, 'newest first');
  t.ok(page.has_more);
  const next = await page.getNextPage();
  t.equal(next.data[0].id, made[0].id, 'the next page after it');
  t.same((await otherClient.files.list({ purpose: 'batch_output' })).data, [], 'by purpose');
});

t.test("the in-process credential's header is refused from the network, with or without a key", async (t) => {
  const attempts: Array<Record<string, string>> = [
    { 'x-sovereign-internal-credential': 'anything' },
    { 'x-sovereign-internal-credential': 'anything', authorization: `Bearer ${key.secret}` },
  ];
  for (const headers of attempts) {
    const r = await fetch(`${daemon.baseURL}/files`, { headers });
    t.equal(r.status, 401);
    const body = (await r.json()) as { error: { code: string; message: string } };
    t.equal(body.error.code, 'invalid_api_key');
    t.match(body.error.message, /not accepted over the network/);
  }
});
