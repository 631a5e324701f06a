// Knowledge bases with the real engines: the tiny embeddings model indexes every chunk (hybrid retrieval: BM25 and
// the HNSW graph fused), the tiny chat model answers from the passages it is given, and uploads arrive as multipart
// files (txt, md, html, pdf: English and an Arabic PDF written in visual order with presentation forms). Planted IDs,
// IBANs and cards never reach the disk, in any order of their digits; a damaged vector index file is rebuilt at boot;
// a deleted document is gone from both indexes, also after a restart; a large ingestion reports progress and does
// not hold up other calls.
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { luhnValid } from '../daemon/scrub/index.js';
import { arabicVisualPdf, englishPdf, garbagePdf, htmlFile, markdownFile, txtFile } from './fixtures/documents.js';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels, type RunningDaemon } from './helpers/daemon.js';

function withLuhn(prefix: string): string {
  for (let d = 0; d <= 9; d++) if (luhnValid(prefix + d)) return prefix + d;
  throw new Error('unreachable');
}
const nid = withLuhn('108765432');
const iqama = withLuhn('234567890');
const card = withLuhn('510510510510510');
const iban = 'SA4420000001234567891234';
const reversed = (s: string) => [...s].reverse().join('');

interface Upload {
  name: string;
  type: string;
  bytes: () => Promise<Uint8Array> | Uint8Array;
  query: string;
}

const UPLOADS: Upload[] = [
  {
    name: 'branch-hours.txt',
    type: 'text/plain',
    bytes: () => txtFile(['The Riyadh branch opens Sunday to Thursday from eight in the morning.', `Duty manager: national ID ${nid}.`]),
    query: 'When does the Riyadh branch open?',
  },
  {
    name: 'transfers.md',
    type: 'text/markdown',
    bytes: () =>
      markdownFile([
        'International transfers',
        `Transfers abroad need a verified IBAN such as ${iban} and take two working days.`,
        `The corporate card ${card} is blocked after three failed attempts.`,
      ]),
    query: 'how long do international transfers abroad take',
  },
  {
    name: 'cafeteria.html',
    type: 'text/html',
    bytes: () => htmlFile('Cafeteria', ['The hospital cafeteria serves vegetarian lunch at noon.', 'Dinner is served at seven.']),
    query: 'vegetarian lunch in the cafeteria',
  },
  {
    name: 'loans.pdf',
    type: 'application/pdf',
    bytes: () =>
      englishPdf([
        ['Loans above the limit go to the credit committee.', `Applicant Iqama ${iqama} is an example.`],
        ['The committee meets every Tuesday.'],
      ]),
    query: 'who approves loans above the limit',
  },
  {
    name: 'طلب.pdf',
    type: 'application/pdf',
    // The crudest producers reverse every character, digits included: the ID must still never reach the disk.
    bytes: () => arabicVisualPdf([[`رقم الهوية ${nid}`, 'يجب تقديم الطلب قبل نهاية الشهر']], { order: 'reversed' }),
    query: 'متى يجب تقديم الطلب',
  },
  {
    name: 'ساعات.pdf',
    type: 'application/pdf',
    bytes: () => arabicVisualPdf([['ساعات العمل من الأحد إلى الخميس', `رقم الهوية ${nid}`]]),
    query: 'ما هي ساعات العمل',
  },
];

const PLANTED = [nid, iqama, card, iban, reversed(nid), reversed(iqama), reversed(card)];

function filesUnder(dir: string): Array<{ path: string; bytes: Buffer }> {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [{ path, bytes: readFileSync(path) }];
  });
}

async function upload(
  d: RunningDaemon,
  secret: string,
  file: { name: string; type: string; bytes: Uint8Array },
  fields: Record<string, string>,
) {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  form.append('file', new Blob([file.bytes], { type: file.type }), file.name);
  const res = await fetch(`${d.baseURL}/documents`, { method: 'POST', headers: { authorization: `Bearer ${secret}` }, body: form });
  return { status: res.status, json: (await res.json()) as any };
}

async function call(d: RunningDaemon, method: string, path: string, secret: string, body?: unknown) {
  const res = await fetch(`${d.baseURL}${path}`, {
    method,
    headers: { authorization: `Bearer ${secret}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    ...(body ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, json: (await res.json()) as any };
}

const until = async (what: string, ok: () => boolean, ms = 20_000) => {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

t.test('uploads, hybrid retrieval, cited answers, recovery', async (t) => {
  const dir = tempDir(t);
  const dataDir = join(dir, 'data');
  const fixtures = makeModelFixtures(dir);
  const config = join(dir, 'config.json');
  // One inference thread: test files run side by side, and llama.cpp threads that wait on a busy core spin.
  writeFileSync(config, JSON.stringify({ documents: { maxUploadBytes: 256 * 1024 }, models: { threads: 1 } }));
  const acme = createKey(dataDir, 'acme');
  const globex = createKey(dataDir, 'globex');
  const args = ['--data-dir', dataDir, '--config', config, ...fixtures.args];
  let d = await startDaemon(t, args);
  await waitForModels(d.baseURL, acme.secret, ['tiny-chat', 'tiny-embed']);

  const ids: string[] = [];
  for (const u of UPLOADS) {
    const r = await upload(
      d,
      acme.secret,
      { name: u.name, type: u.type, bytes: await u.bytes() },
      {
        knowledge_base: 'handbook',
        metadata: JSON.stringify({ source: 'upload', reviewer: `employee ${iqama}` }),
      },
    );
    t.equal(r.status, 201, `${u.name} is ingested: ${JSON.stringify(r.json)}`);
    t.equal(r.json.filename, u.name, 'the file name is kept (scrubbed)');
    t.same(r.json.metadata, { source: 'upload', reviewer: 'employee [IQAMA]' }, 'metadata of an upload is scrubbed');
    ids.push(r.json.id);
  }
  t.match((await call(d, 'GET', `/documents/${ids[0]}`, acme.secret)).json.redactions, { NATIONAL_ID: 1 });
  t.match((await call(d, 'GET', `/documents/${ids[1]}`, acme.secret)).json.redactions, { IBAN: 1, CARD: 1 });
  t.match((await call(d, 'GET', `/documents/${ids[3]}`, acme.secret)).json.redactions, { IQAMA: 2 });
  t.match((await call(d, 'GET', `/documents/${ids[4]}`, acme.secret)).json.redactions, { NATIONAL_ID: 1 }, 'a reversed ID is caught');
  t.match((await call(d, 'GET', `/documents/${ids[5]}`, acme.secret)).json.redactions, { NATIONAL_ID: 1 });

  // Every query finds its document in the top 3, by both rankings fused, and the chat model answers in its language.
  for (const [i, u] of UPLOADS.entries()) {
    const r = await call(d, 'POST', '/documents/query', acme.secret, {
      knowledge_base: 'handbook',
      query: u.query,
      top_k: 3,
      max_tokens: 24,
    });
    t.equal(r.status, 200, JSON.stringify(r.json));
    t.equal(r.json.retrieval, 'hybrid');
    const top = r.json.citations.map((c: { document_id: string }) => c.document_id);
    t.ok(top.slice(0, 3).includes(ids[i]), `"${u.query}" finds ${u.name} in the top 3 (got ${top.join(', ')})`);
    t.equal(r.json.model, 'tiny-chat', 'the served chat model answers');
    t.type(r.json.answer, 'string');
    t.equal(r.json.language, /[\u0600-\u06ff]/.test(u.query) ? 'ar' : 'en', 'the answer is asked for in the question’s language');
    t.match(r.json.citations[0], { index: 1, document_id: String, chunk: Number, score: Number, text: String });
  }
  const lexicalOnly = await call(d, 'POST', '/documents/query', acme.secret, {
    knowledge_base: 'handbook',
    query: UPLOADS[2].query,
    model: 'tiny-embed',
  });
  t.equal(lexicalOnly.status, 404, 'an embeddings model cannot answer');
  t.equal((await call(d, 'POST', '/documents/query', globex.secret, { knowledge_base: 'handbook', query: 'branch' })).status, 404);

  // Uploads that cannot be used.
  const bad = async (
    file: { name: string; type: string; bytes: Uint8Array },
    fields: Record<string, string> = { knowledge_base: 'handbook' },
  ) => upload(d, acme.secret, file, fields);
  const docx = await bad({
    name: 'report.docx',
    type: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
    bytes: new Uint8Array(10),
  });
  t.equal(docx.status, 415);
  t.match(docx.json.error, { param: 'file', message: /txt.*md.*html.*pdf|\.txt.*\.pdf/i });
  const corrupt = await bad({ name: 'scan.pdf', type: 'application/pdf', bytes: garbagePdf() });
  t.equal(corrupt.status, 400);
  t.match(corrupt.json.error, { type: 'invalid_request_error', param: 'file' });
  const huge = await bad({ name: 'huge.txt', type: 'text/plain', bytes: new Uint8Array(300 * 1024).fill(0x61) });
  t.equal(huge.status, 413);
  t.match(huge.json.error, { code: 'payload_too_large', message: /documents\.maxUploadBytes/ });
  t.equal((await bad({ name: 'empty.txt', type: 'text/plain', bytes: new Uint8Array(0) })).status, 400);
  t.equal((await bad({ name: 'a.txt', type: 'text/plain', bytes: txtFile(['x']) }, {})).status, 400, 'knowledge_base is required');
  const badMeta = await bad({ name: 'a.txt', type: 'text/plain', bytes: txtFile(['x']) }, { knowledge_base: 'handbook', metadata: '{' });
  t.match(badMeta, { status: 400, json: { error: { param: 'metadata' } } });

  // A large document: progress in the log, and other calls answered while it is embedded.
  const large = Array.from({ length: 1000 }, (_, i) => `Paragraph ${i} of the archived circular about branch procedures and forms.`).join(
    '\n\n',
  );
  const ingesting = call(d, 'POST', '/documents', acme.secret, { knowledge_base: 'archive', content: large });
  let ingested = false;
  void ingesting.then(() => (ingested = true));
  await until('embedding progress', () => d.logs.some((l) => l.includes('"embedding chunks"')));
  const meanwhile = await call(d, 'GET', '/models', acme.secret);
  t.equal(meanwhile.status, 200);
  t.notOk(ingested, 'another call was answered while the large document was still being embedded');
  t.equal((await ingesting).status, 201);

  // Deleting removes the document from both indexes.
  t.equal((await call(d, 'DELETE', `/documents/${ids[2]}`, acme.secret)).status, 200);
  const afterDelete = await call(d, 'POST', '/documents/query', acme.secret, {
    knowledge_base: 'handbook',
    query: UPLOADS[2].query,
    top_k: 10,
  });
  t.notOk(
    afterDelete.json.citations.some((c: { document_id: string }) => c.document_id === ids[2]),
    'a deleted document is never retrieved',
  );

  // The graph files are written shortly after changes; a damaged one is rebuilt from the stored vectors at boot.
  await until(
    'vector index saved',
    () => d.logs.length > 0 && filesUnder(join(dataDir, 'vectors')).filter((f) => f.path.endsWith('.hnsw')).length === 2,
  );
  t.equal(await d.stop(), 0);
  const graphs = filesUnder(join(dataDir, 'vectors')).filter((f) => f.path.endsWith('.hnsw'));
  const damaged = graphs[0];
  const garbage = Buffer.from(damaged.bytes);
  garbage.fill(0xff, 0, 64);
  writeFileSync(damaged.path, garbage.subarray(0, Math.floor(garbage.length / 2)));

  d = await startDaemon(t, args);
  await until('rebuild', () => d.logs.some((l) => l.includes('vector index rebuilt from the stored vectors')));
  t.ok(
    d.logs.some((l) => l.includes('vector index damaged')),
    'the damage is reported',
  );
  await waitForModels(d.baseURL, acme.secret, ['tiny-chat', 'tiny-embed']);
  for (const [i, u] of UPLOADS.entries()) {
    if (i === 2) continue;
    const r = await call(d, 'POST', '/documents/query', acme.secret, {
      knowledge_base: 'handbook',
      query: u.query,
      top_k: 3,
      max_tokens: 24,
    });
    t.equal(r.json.retrieval, 'hybrid');
    const top = r.json.citations.map((c: { document_id: string }) => c.document_id);
    t.ok(top.includes(ids[i]), `after the rebuild, "${u.query}" still finds ${u.name}`);
    t.notOk(top.includes(ids[2]), 'and never the deleted document');
  }
  t.not(readFileSync(damaged.path).length, garbage.length / 2, 'the rebuilt index is saved again');
  t.equal(await d.stop(), 0);

  // Nothing planted is on disk: not in lmdb, not in the vector files, in either order of its digits.
  const files = filesUnder(dir).filter((f) => f.path.startsWith(dataDir));
  const found = PLANTED.flatMap((value) => files.filter((f) => f.bytes.includes(Buffer.from(value))).map((f) => `${value} in ${f.path}`));
  t.same(found, [], 'no planted value on disk');
  t.ok(
    files.some((f) => f.bytes.includes(Buffer.from('[NATIONAL_ID]'))),
    'while the scrubbed documents are there',
  );
});
