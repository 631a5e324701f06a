// OpenAI's Batch API (/v1/files, /v1/batches) through the official client, on the real daemon and the tiny real
// models: an input file of chat, embeddings, responses and completions lines is scrubbed as it is stored, run line by
// line through the pipeline, and answered in an output file holding every custom_id once; files and batches are their
// project's only; bad files are refused naming the line.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { makeModelFixtures } from './fixtures/models.js';
import { cli, createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const NATIONAL_ID = '1000000008';
const IBAN = 'SA03 8000 0000 6080 1016 7519';
const IBAN_COMPACT = 'SA0380000000608010167519';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = join(dir, 'data');
const key = createKey(dataDir);
const other = createKey(dataDir, 'other-team');
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-chat', 'tiny-embed']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const otherClient = new OpenAI({ apiKey: other.secret, baseURL: daemon.baseURL, maxRetries: 0 });

const jsonl = (lines: unknown[]) => Buffer.from(lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n');
const upload = async (lines: unknown[], as = client) =>
  as.files.create({ file: await toFile(jsonl(lines), 'input.jsonl'), purpose: 'batch' });

const chat = (id: string, content: string) => ({
  custom_id: id,
  method: 'POST',
  url: '/v1/chat/completions',
  body: { model: 'tiny-chat', messages: [{ role: 'user', content }], max_tokens: 8, temperature: 0 },
});
const lines = [
  chat('chat-1', 'Hello'),
  {
    ...chat('chat-pii', `My national ID is ${NATIONAL_ID} and my IBAN ${IBAN}.`),
    body: { ...chat('chat-pii', `My national ID is ${NATIONAL_ID} and my IBAN ${IBAN}.`).body, user: `iban ${IBAN}` },
  },
  { custom_id: 'embed-1', method: 'POST', url: '/v1/embeddings', body: { model: 'tiny-embed', input: ['one', `iban ${IBAN}`] } },
  { custom_id: 'resp-1', method: 'POST', url: '/v1/responses', body: { model: 'tiny-chat', input: 'Hi there', max_output_tokens: 8 } },
  { custom_id: 'comp-1', method: 'POST', url: '/v1/completions', body: { model: 'tiny-chat', prompt: 'Once upon', max_tokens: 4 } },
  // Answered with an error: it goes to the error file.
  { ...chat('missing-model', 'Hi'), body: { model: 'no-such-model', messages: [{ role: 'user', content: 'Hi' }] } },
];

/** Every file under `root`, read whole. */
function everyFile(root: string): Array<{ path: string; bytes: Buffer }> {
  const out: Array<{ path: string; bytes: Buffer }> = [];
  for (const name of readdirSync(root)) {
    const path = join(root, name);
    if (statSync(path).isDirectory()) out.push(...everyFile(path));
    else out.push({ path, bytes: readFileSync(path) });
  }
  return out;
}

async function finished(id: string, as = client, ms = 45_000): Promise<OpenAI.Batch> {
  const until = Date.now() + ms;
  for (;;) {
    const batch = await as.batches.retrieve(id);
    if (['completed', 'failed', 'expired', 'cancelled'].includes(batch.status)) return batch;
    if (Date.now() > until) throw new Error(`batch ${id} still ${batch.status}: ${JSON.stringify(batch.request_counts)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const outputLines = async (id: string | null | undefined) => {
  if (!id) return [];
  const text = await (await client.files.content(id)).text();
  return text
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
};

let inputId = '';
let batchId = '';

t.test('an input file is checked, scrubbed as it is stored, and answered back scrubbed', async (t) => {
  const { data: file, response } = await client.files
    .create({ file: await toFile(jsonl(lines), 'input.jsonl'), purpose: 'batch' })
    .withResponse();
  inputId = file.id;
  t.match(file, { object: 'file', purpose: 'batch', status: 'processed', filename: 'input.jsonl' });
  t.match(file.id, /^file-[0-9a-f]{24}$/);
  t.ok(file.expires_at! > file.created_at, 'it expires');
  t.match(response.headers.get('x-audit-leaf'), /^\d+$/);
  const content = await (await client.files.content(file.id)).text();
  t.equal(Buffer.byteLength(content), file.bytes, 'bytes is the size of what is served');
  t.notMatch(content, NATIONAL_ID);
  t.notMatch(content, IBAN);
  t.match(content, 'My national ID is [NATIONAL_ID] and my IBAN [IBAN].');
  t.match(content, '"input":["one","iban [IBAN]"]');
  t.match(content, '"user":"iban [IBAN]"', 'a field no engine sees is scrubbed too');
  t.same(
    content
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l).custom_id),
    lines.map((l) => l.custom_id),
    'every line, in order',
  );
  // Nothing under the data directory holds a raw value: not the database, not the audit journal.
  for (const { path, bytes } of everyFile(dataDir)) {
    for (const raw of [NATIONAL_ID, IBAN, IBAN_COMPACT]) t.equal(bytes.indexOf(raw), -1, `${raw} is not in ${path}`);
  }
  const retrieved = await client.files.retrieve(file.id);
  t.same(retrieved, file);
  const listed = await client.files.list({ purpose: 'batch' });
  t.ok(listed.data.some((f) => f.id === file.id));
});

t.test('a batch runs every line through its route; the output holds every custom_id once, in OpenAI shapes', async (t) => {
  const created = await client.batches.create({
    input_file_id: inputId,
    endpoint: '/v1/chat/completions',
    completion_window: '24h',
    metadata: { purpose: 'test', owner: `id ${NATIONAL_ID}` },
  });
  batchId = created.id;
  t.match(created, { object: 'batch', input_file_id: inputId, status: 'validating', completion_window: '24h' });
  t.match(created.id, /^batch_[0-9a-f]{24}$/);
  t.same(created.metadata, { purpose: 'test', owner: 'id [NATIONAL_ID]' }, 'metadata is kept scrubbed');
  t.same(created.request_counts, { total: lines.length, completed: 0, failed: 0 });
  const batch = await finished(created.id);
  t.equal(batch.status, 'completed');
  t.same(batch.request_counts, { total: lines.length, completed: lines.length - 1, failed: 1 });
  for (const at of ['in_progress_at', 'finalizing_at', 'completed_at'] as const) t.type(batch[at], 'number', at);
  t.ok(batch.output_file_id && batch.error_file_id);
  const output = await outputLines(batch.output_file_id);
  const errors = await outputLines(batch.error_file_id);
  const ids = [...output, ...errors].map((l) => l.custom_id).sort();
  t.same(ids, lines.map((l) => l.custom_id).sort(), 'every custom_id exactly once across output and error files');
  const byId = Object.fromEntries([...output, ...errors].map((l) => [l.custom_id, l]));
  for (const line of output) {
    t.match(line, { id: /^batch_req_[0-9a-f]{24}$/, response: { status_code: 200, request_id: /^req_[0-9a-f]{32}$/ }, error: null });
  }
  t.match(byId['chat-1'].response.body, { object: 'chat.completion', model: 'tiny-chat', choices: [{ message: { role: 'assistant' } }] });
  t.match(byId['embed-1'].response.body, { object: 'list', data: [{ object: 'embedding' }, { object: 'embedding' }] });
  t.match(byId['resp-1'].response.body, { object: 'response', model: 'tiny-chat' });
  t.equal(byId['chat-1'].response.body.service_tier, 'flex', 'run at the flex tier');
  t.equal(byId['resp-1'].response.body.service_tier, 'flex');
  t.match(byId['comp-1'].response.body, { object: 'text_completion' });
  t.match(byId['missing-model'], { response: { status_code: 404, body: { error: { code: 'model_not_found' } } }, error: null });
  const outputFile = await client.files.retrieve(batch.output_file_id!);
  t.match(outputFile, { purpose: 'batch_output', filename: `${batch.id}_output.jsonl` });
  const listed = await client.batches.list();
  t.ok(listed.data.some((b) => b.id === batch.id));
});

t.test("another project's key cannot see, download, delete or batch a file, nor see or cancel a batch", async (t) => {
  const notFound = async (what: string, call: Promise<unknown>) => {
    const err = await call.then(
      () => null,
      (e: unknown) => e,
    );
    t.ok(err instanceof OpenAI.NotFoundError, `${what}: 404`);
  };
  await notFound('retrieve', otherClient.files.retrieve(inputId));
  await notFound('content', otherClient.files.content(inputId));
  await notFound('delete', otherClient.files.delete(inputId));
  await notFound(
    'batch',
    otherClient.batches.create({ input_file_id: inputId, endpoint: '/v1/chat/completions', completion_window: '24h' }),
  );
  await notFound('batch retrieve', otherClient.batches.retrieve(batchId));
  await notFound('batch cancel', otherClient.batches.cancel(batchId));
  t.notOk(
    (await otherClient.files.list()).data.some((f) => f.id === inputId),
    'not listed',
  );
  t.notOk(
    (await otherClient.batches.list()).data.some((b) => b.id === batchId),
    'not listed',
  );
  t.ok(await client.files.retrieve(inputId), 'still there for its own project');
});

t.test('bad files are refused with 400 naming the line', async (t) => {
  const refused = async (what: string, content: unknown[], message: RegExp) => {
    const err = (await upload(content).catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
    t.ok(err instanceof OpenAI.BadRequestError, `${what}: 400`);
    t.match(err.message, message, what);
  };
  await refused('not JSON', [chat('a', 'x'), '{"custom_id": "b", oops'], /Line 2 of the file: it is not JSON/);
  await refused('not JSONL at all', ['hello, world'], /Line 1 of the file: it is not JSON/);
  await refused(
    'duplicate custom_id',
    [chat('a', 'x'), chat('b', 'y'), chat('a', 'z')],
    /Line 3 .*custom_id 'a' is already the custom_id of line 1/,
  );
  await refused(
    'missing custom_id',
    [{ method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: 'x' } }],
    /Line 1 .*custom_id is missing/,
  );
  await refused(
    'unknown url',
    [chat('a', 'x'), { ...chat('b', 'y'), url: '/v1/moderations' }],
    /Line 2 .*url "\/v1\/moderations" is not an endpoint/,
  );
  await refused('body not an object', [{ ...chat('a', 'x'), body: 'hello' }], /Line 1 .*body must be a JSON object/);
  await refused(
    'body the route refuses',
    [{ ...chat('a', 'x'), body: { model: 'tiny-chat' } }],
    /Line 1 .*Missing required parameter 'messages'/,
  );
  await refused(
    'a custom_id holding an ID',
    [chat(`customer ${NATIONAL_ID}`, 'x')],
    /Line 1 .*custom_id holds what looks like a national ID/,
  );
  await refused('a stream', [{ ...chat('a', 'x'), body: { ...chat('a', 'x').body, stream: true } }], /Line 1 .*stream/);
  await refused(
    'token ids',
    [{ custom_id: 'a', method: 'POST', url: '/v1/embeddings', body: { model: 'm', input: [1, 2, 3] } }],
    /token ids/,
  );
  const wrongPurpose = (await client.files
    .create({ file: await toFile(jsonl([chat('a', 'x')]), 'input.jsonl'), purpose: 'assistants' })
    .catch((e: unknown) => e)) as InstanceType<typeof OpenAI.BadRequestError>;
  t.ok(wrongPurpose instanceof OpenAI.BadRequestError);
  t.match(wrongPurpose.message, /purpose 'assistants' are not kept here/);
  t.equal(wrongPurpose.param, 'purpose');
});

t.test('a file is deleted: gone at once', async (t) => {
  const file = await upload([chat('only', 'Hi')]);
  t.same(await client.files.delete(file.id), { id: file.id, object: 'file', deleted: true });
  const gone = await client.files.retrieve(file.id).catch((e: unknown) => e);
  t.ok(gone instanceof OpenAI.NotFoundError);
});

t.test('a line of 64 KiB or more is scrubbed in the worker thread, as a large call is', async (t) => {
  const long = `${'lorem ipsum '.repeat(7000)} id ${NATIONAL_ID}`;
  const file = await upload([chat('long', long)]);
  const content = await (await client.files.content(file.id)).text();
  t.ok(content.length > 64 * 1024);
  t.notMatch(content, NATIONAL_ID);
  t.match(content, 'id [NATIONAL_ID]"');
  await client.files.delete(file.id);
});

t.test('the upload, the batch and each line have their audit entries; the log verifies', async (t) => {
  await daemon.stop();
  const out = join(dir, 'export');
  t.equal(cli(['audit', 'export', '--data-dir', dataDir, '--out', out]).code, 0);
  const entries = readFileSync(join(out, 'entries.jsonl'), 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));
  const calls = entries.filter((e) => e.kind === 'call');
  const uploads = calls.filter((e) => e.route === '/v1/files' && e.method === 'POST' && e.status === 200);
  t.match(uploads[0], { redactions: { NATIONAL_ID: 1, IBAN: 3 } }, "the first upload's entry counts what was replaced");
  const lineRoutes = calls.filter((e) => ['/v1/chat/completions', '/v1/embeddings', '/v1/responses', '/v1/completions'].includes(e.route));
  t.equal(lineRoutes.length, lines.length, 'one entry per line run');
  t.ok(
    lineRoutes.every((e) => e.key === key.id),
    'each as the key that made the batch',
  );
  const verified = cli(['audit', 'verify', '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software' });
  t.equal(verified.code, 0, verified.stdout + verified.stderr);
  // Once every line has run and the outputs are written, still no raw value anywhere in the data directory.
  const raw = everyFile(dataDir).filter(({ bytes }) => [NATIONAL_ID, IBAN, IBAN_COMPACT].some((v) => bytes.indexOf(v) !== -1));
  t.same(
    raw.map((f) => f.path),
    [],
    'no raw value on disk',
  );
});
