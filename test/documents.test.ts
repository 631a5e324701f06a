// Knowledge bases through the running daemon: a bilingual corpus generated here, with national IDs, IBANs and cards
// planted in text, filenames and metadata, is ingested; nothing planted is anywhere on disk afterwards; queries in
// Arabic and English find the right document (lexical retrieval); another project can neither see, query nor
// delete; deletion is complete; limits answer 413/400.
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { luhnValid } from '../daemon/scrub/index.js';
import { createKey, startDaemon, tempDir } from './helpers/daemon.js';

function withLuhn(prefix: string): string {
  for (let d = 0; d <= 9; d++) if (luhnValid(prefix + d)) return prefix + d;
  throw new Error('unreachable');
}
const toArabicIndic = (s: string) => s.replace(/[0-9]/g, (d) => String.fromCharCode(0x0660 + Number(d)));

const nid = withLuhn('107654321');
const iqama = withLuhn('245678901');
const card = withLuhn('453201511283036');
const iban = 'SA0380000000608010167519';

const DOCUMENTS = [
  {
    filename: `opening-hours-${nid}.md`,
    metadata: { owner: `employee ${iqama}`, tags: ['branches'] },
    content: `# Branch opening hours\n\nThe Riyadh branch opens Sunday to Thursday from 8 in the morning.\n\nAsk for the duty manager, national ID ${nid}, for weekend appointments.`,
    query: 'When does the Riyadh branch open?',
  },
  {
    filename: 'transfers.txt',
    metadata: null,
    content: `International transfers need a verified IBAN. Our settlement account is ${iban} and the card on file is ${card}.\n\nTransfers abroad take two working days.`,
    query: 'how long do international money transfers take abroad',
  },
  {
    filename: 'cafeteria.txt',
    metadata: null,
    content: 'The hospital cafeteria serves lunch at noon and dinner at seven. Vegetarian meals are available on request.',
    query: 'vegetarian lunch in the cafeteria',
  },
  {
    filename: 'مواعيد-العيادات.txt',
    metadata: { القسم: 'العيادات' },
    content: `مواعيد العيادات الخارجية من الأحد إلى الخميس. رقم هوية المراجع ${toArabicIndic(nid)} مطلوب عند التسجيل.\n\nيغلق قسم الأشعة يوم الجمعة.`,
    query: 'متى تفتح العيادات الخارجية',
  },
  {
    filename: 'الإقامة.txt',
    metadata: null,
    content: `تجديد الإقامة يتطلب جواز سفر ساري المفعول. رقم الإقامة ${iqama} مثال على الصيغة.\n\nتستغرق المعاملة خمسة أيام عمل.`,
    query: 'ما هي متطلبات تجديد الاقامة',
  },
  {
    filename: 'الحوالات.txt',
    metadata: null,
    content: `الحوالات الدولية تحتاج إلى آيبان موثق مثل ${iban.slice(0, 4)} ${iban.slice(4)}. تصل الحوالة خلال يومي عمل.`,
    query: 'كم تستغرق الحوالات الدولية',
  },
];

const PLANTED = [nid, iqama, card, iban, toArabicIndic(nid), `${iban.slice(0, 4)} ${iban.slice(4)}`];

/** Every file under `dir`, read as bytes. */
function filesUnder(dir: string): Array<{ path: string; bytes: Buffer }> {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [{ path, bytes: readFileSync(path) }];
  });
}

t.test('ingest, find, isolate, delete: and nothing planted reaches the disk', async (t) => {
  const dataDir = tempDir(t);
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ documents: { maxChunksPerDocument: 40 } }));
  const acme = createKey(dataDir, 'acme');
  const globex = createKey(dataDir, 'globex');
  const d = await startDaemon(t, ['--data-dir', dataDir, '--config', join(dataDir, 'config.json')]);
  const call = async (method: string, path: string, secret: string, body?: unknown) => {
    const res = await fetch(`${d.baseURL}${path}`, {
      method,
      headers: { authorization: `Bearer ${secret}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, json: (await res.json()) as any };
  };

  const ids: string[] = [];
  for (const doc of DOCUMENTS) {
    const r = await call('POST', '/documents', acme.secret, {
      knowledge_base: 'policies',
      content: doc.content,
      filename: doc.filename,
      ...(doc.metadata ? { metadata: doc.metadata } : {}),
    });
    t.equal(r.status, 201, JSON.stringify(r.json));
    ids.push(r.json.id);
  }
  const first = await call('GET', `/documents/${ids[0]}`, acme.secret);
  t.match(first.json, { object: 'document', knowledge_base: 'policies', filename: 'opening-hours-[NATIONAL_ID].md' });
  t.same(first.json.metadata, { owner: 'employee [IQAMA]', tags: ['branches'] }, 'metadata strings are scrubbed');
  t.match(first.json.redactions, { NATIONAL_ID: 2, IQAMA: 1 });
  const second = await call('GET', `/documents/${ids[1]}`, acme.secret);
  t.match(second.json.redactions, { IBAN: 1, CARD: 1 });

  for (const [i, doc] of DOCUMENTS.entries()) {
    const r = await call('POST', '/documents/query', acme.secret, { knowledge_base: 'policies', query: doc.query, top_k: 3 });
    t.equal(r.status, 200);
    t.equal(r.json.retrieval, 'lexical');
    const top3 = r.json.citations.map((c: { document_id: string }) => c.document_id);
    t.ok(top3.slice(0, 3).includes(ids[i]), `"${doc.query}" finds ${doc.filename} in the top 3 (got ${top3.join(', ')})`);
  }
  const scrubbedQuery = await call('POST', '/documents/query', acme.secret, { knowledge_base: 'policies', query: `who has ID ${nid}?` });
  t.equal(scrubbedQuery.json.query, 'who has ID [NATIONAL_ID]?', 'the query is scrubbed too');
  const unknownModel = await call('POST', '/documents/query', acme.secret, { knowledge_base: 'policies', query: 'x', model: 'm' });
  t.equal(unknownModel.status, 404, 'a query naming a chat model that is not served is refused');
  t.match(unknownModel.json.error, { code: 'model_not_found', param: 'model' });
  t.equal(scrubbedQuery.json.answer, null, 'with no chat model served, the ranked passages alone');

  // Another project sees nothing and can do nothing.
  t.same((await call('GET', '/documents', globex.secret)).json.data, []);
  t.equal((await call('GET', `/documents/${ids[0]}`, globex.secret)).status, 404);
  t.equal((await call('DELETE', `/documents/${ids[0]}`, globex.secret)).status, 404);
  t.equal((await call('POST', '/documents/query', globex.secret, { knowledge_base: 'policies', query: 'branch' })).status, 404);
  t.equal((await call('GET', '/documents?knowledge_base=policies', acme.secret)).json.data.length, DOCUMENTS.length);

  // Deleting is complete: gone from the list, from reads and from retrieval.
  t.equal((await call('DELETE', `/documents/${ids[2]}`, acme.secret)).status, 200);
  t.equal((await call('GET', `/documents/${ids[2]}`, acme.secret)).status, 404);
  const afterDelete = await call('POST', '/documents/query', acme.secret, {
    knowledge_base: 'policies',
    query: 'vegetarian cafeteria lunch',
  });
  t.notOk(
    afterDelete.json.citations.some((c: { document_id: string }) => c.document_id === ids[2]),
    'a deleted document is never retrieved',
  );

  // Limits and bad input.
  const long = await call('POST', '/documents', acme.secret, { knowledge_base: 'policies', content: 'A sentence of text. '.repeat(3000) });
  t.equal(long.status, 413);
  t.match(long.json.error, { code: 'payload_too_large', message: /documents\.maxChunksPerDocument/ });
  t.equal((await call('POST', '/documents', acme.secret, { knowledge_base: 'bad name!', content: 'x' })).status, 400);
  t.equal((await call('POST', '/documents', acme.secret, { knowledge_base: 'kb', content: '   \n  ' })).status, 400);

  // After a restart, retrieval is rebuilt from what is stored.
  t.equal(await d.stop(), 0);
  const again = await startDaemon(t, ['--data-dir', dataDir, '--config', join(dataDir, 'config.json')]);
  const rebuilt = await fetch(`${again.baseURL}/documents/query`, {
    method: 'POST',
    headers: { authorization: `Bearer ${acme.secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ knowledge_base: 'policies', query: DOCUMENTS[4].query, top_k: 3 }),
  });
  const rebuiltJson = (await rebuilt.json()) as { citations: Array<{ document_id: string }> };
  t.ok(
    rebuiltJson.citations.some((c) => c.document_id === ids[4]),
    'found again after a restart',
  );
  t.equal(await again.stop(), 0);

  // Nothing planted is anywhere in the data directory, in any form it was written in.
  const files = filesUnder(dataDir);
  t.ok(
    files.some((f) => f.path.endsWith('sovereign.mdb')),
    'the database is there to search',
  );
  const found = PLANTED.flatMap((value) => files.filter((f) => f.bytes.includes(Buffer.from(value))).map((f) => `${value} in ${f.path}`));
  t.same(found, [], 'no planted value on disk');
  t.ok(
    files.some((f) => f.bytes.includes(Buffer.from('[NATIONAL_ID]'))),
    'while the scrubbed documents are (the search above is not vacuous)',
  );
});
