// The retrieval building blocks on their own: Arabic normal form and index terms, sentence-aware chunking with
// overlap, and BM25 ranking (including what a removed chunk leaves behind).
import t from 'tap';
import { Bm25Index, bestOf } from '../daemon/documents/bm25.js';
import { chunkText } from '../daemon/documents/chunk.js';
import { languageOf, normalizeForSearch, terms } from '../daemon/documents/text.js';

t.test('Arabic variants fold to one form; digits of every script read as ASCII', async (t) => {
  t.equal(normalizeForSearch('إدارةُ الأموالِ'), normalizeForSearch('اداره الاموال'), 'hamza alef forms, taa marbuta, diacritics');
  t.equal(normalizeForSearch('مستشفـــى'), normalizeForSearch('مستشفي'), 'tatweel and alef maqsura');
  t.equal(normalizeForSearch('\ufef7\ufe8e'), normalizeForSearch('لأا'), 'presentation forms unfold');
  t.equal(normalizeForSearch('٢٠٢٥ و ۱۴۴۶'), '2025 و 1446');
  t.equal(normalizeForSearch('Riyadh BRANCH'), 'riyadh branch');
});

t.test('terms: function words dropped, the article and fused conjunctions stripped, English plurals folded', async (t) => {
  t.same(terms('والمستشفى في الرياض'), ['مستشفي', 'رياض']);
  t.same(terms('بالمستشفى'), ['مستشفي']);
  t.same(terms('The transfers of the branches'), ['transfer', 'branche']);
  t.same(terms('policies'), ['policy']);
  t.equal(languageOf('ما هي ساعات العمل؟ (hours)'), 'ar');
  t.equal(languageOf('What are the opening hours? شكرا'), 'en');
});

t.test('chunks: whole sentences, paragraphs kept together, overlap, nothing lost, nothing over max', async (t) => {
  const sentence = (i: number) =>
    i % 2 ? `هذه الجملة رقم ${i} عن إجراءات الفرع.` : `Sentence ${i} explains the branch procedure in detail.`;
  const text = Array.from({ length: 12 }, (_, p) => Array.from({ length: 6 }, (_, s) => sentence(p * 6 + s)).join(' ')).join('\n\n');
  const chunks = chunkText(text, { target: 300, max: 500, overlap: 80 });
  t.ok(chunks.length > 5, `${chunks.length} chunks`);
  for (let i = 0; i < 72; i++)
    t.ok(
      chunks.some((c) => c.includes(sentence(i))),
      `sentence ${i} is in a chunk, whole`,
    );
  t.ok(
    chunks.every((c) => c.length <= 500),
    'none over max',
  );
  const overlapping = chunks.slice(1).filter((c, i) => {
    const first = c.split(/(?<=[.؟!])\s/)[0];
    return chunks[i].includes(first);
  });
  t.ok(overlapping.length >= chunks.length / 2, `${overlapping.length} chunks start with the end of the one before`);
  const runOn = chunkText(`${'word '.repeat(1000)}`, { target: 300, max: 500, overlap: 80 });
  t.ok(runOn.every((c) => c.length <= 500) && runOn.join(' ').split(' ').length >= 1000, 'a run-on text is cut at spaces');
  t.same(chunkText('   \n\n  '), [], 'nothing to chunk');
});

t.test('BM25: the chunk with the query terms ranks first, in either language and spelling', async (t) => {
  const index = new Bm25Index();
  const docs = [
    'Opening hours of the Riyadh branch are Sunday to Thursday, 8 to 4.',
    'To transfer money abroad, the customer needs a verified IBAN.',
    'ساعات عمل فرع جدة من الأحد إلى الخميس.',
    'يمكن تحويل الأموال إلى الخارج بعد التحقق من الآيبان.',
    'The hospital cafeteria serves lunch at noon.',
  ];
  docs.forEach((d, i) => index.add(i, d));
  t.equal(index.search('When is the Riyadh branch open? hours', 3)[0]?.id, 0);
  t.equal(index.search('international money transfers', 3)[0]?.id, 1);
  t.equal(index.search('ما هي ساعات العمل في فرع جده', 3)[0]?.id, 2, 'جده matches جدة');
  t.equal(index.search('تحويل الاموال للخارج', 3)[0]?.id, 3, 'الاموال matches الأموال');
  t.same(index.search('zebra', 3), [], 'no shared term, no result');
  index.remove(1);
  t.notOk(
    index.search('transfer money IBAN', 5).some((r) => r.id === 1),
    'a removed chunk is never returned',
  );
  t.equal(index.size, 4);
  t.throws(() => index.add(0, 'again'), /already indexed/);
});

t.test('BM25 over many chunks: removals compact, top k without sorting everything', async (t) => {
  const index = new Bm25Index();
  for (let i = 0; i < 6000; i++) index.add(i, `record ${i} common words about the branch ${i % 7 === 0 ? 'special' : ''}`);
  for (let i = 0; i < 6000; i += 2) index.remove(i);
  const hits = index.search('special record', 10);
  t.equal(hits.length, 10);
  t.ok(
    hits.every((h) => h.id % 2 === 1 && h.id % 7 === 0),
    'only live chunks with the rare term',
  );
  const scores = new Map([
    [1, 0.5],
    [2, 3],
    [3, 2],
    [4, 3],
  ]);
  t.same(bestOf(scores, 3), [
    { id: 2, score: 3 },
    { id: 4, score: 3 },
    { id: 3, score: 2 },
  ]);
});

/** Okapi BM25 written the plain way, over the live chunks only: what the index must rank exactly like. */
function referenceBm25(chunks: Map<number, string>, query: string, k: number): Array<{ id: number; score: number }> {
  const docs = [...chunks].map(([id, text]) => ({ id, words: terms(text) }));
  const average = docs.reduce((sum, d) => sum + d.words.length, 0) / docs.length;
  const scores = new Map<number, number>();
  for (const term of new Set(terms(query))) {
    const df = docs.filter((d) => d.words.includes(term)).length;
    if (!df) continue;
    const idf = Math.log(1 + (docs.length - df + 0.5) / (df + 0.5));
    for (const d of docs) {
      const tf = d.words.filter((w) => w === term).length;
      if (!tf) continue;
      const score = (idf * tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * d.words.length) / average));
      scores.set(d.id, (scores.get(d.id) ?? 0) + score);
    }
  }
  return [...scores]
    .map(([id, score]) => ({ id, score }))
    .sort((a, b) => b.score - a.score || a.id - b.id)
    .slice(0, k);
}

t.test('BM25 ranks as the formula does, through removals, compaction and reused slots', async (t) => {
  let seed = 7;
  const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const vocabulary = ['branch', 'riyadh', 'transfer', 'iban', 'loan', 'فرع', 'تحويل', 'قرض', 'حساب', 'card', 'rate', 'policy'];
  const text = () =>
    Array.from({ length: 1 + Math.floor(random() * 12) }, () => vocabulary[Math.floor(random() * vocabulary.length)]).join(' ');
  const index = new Bm25Index();
  const live = new Map<number, string>();
  let nextId = 100;
  const compare = (label: string) => {
    for (const query of ['branch loan', 'تحويل حساب', 'iban card rate policy', 'riyadh']) {
      const got = index.search(query, 8);
      const want = referenceBm25(live, query, 8);
      t.same(
        got.map((h) => h.id),
        want.map((h) => h.id),
        `${label}: "${query}" ranks the same chunks`,
      );
      t.ok(
        got.every((h, i) => Math.abs(h.score - (want[i]?.score ?? NaN)) < 1e-9),
        `${label}: "${query}" scores match`,
      );
    }
  };
  const addChunk = () => {
    const chunk = text();
    live.set(nextId, chunk);
    index.add(nextId++, chunk);
  };
  for (let i = 0; i < 3000; i++) addChunk();
  compare('fresh');
  // More than 1000 removals and a fifth of the chunks: the postings are compacted and the slots freed.
  for (const id of [...live.keys()].filter(() => random() < 0.6)) {
    index.remove(id);
    live.delete(id);
  }
  index.remove(99);
  compare('after removals');
  for (let i = 0; i < 1500; i++) addChunk();
  compare('with freed slots reused');
  t.equal(index.size, live.size);
  t.ok(index.has(nextId - 1), 'the newest chunk is indexed');
  t.equal(index.has(100), live.has(100), 'the first chunk is indexed exactly when it is live');
});
