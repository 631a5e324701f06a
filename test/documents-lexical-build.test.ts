// After a restart, each knowledge base's BM25 index is rebuilt from the stored chunks in slices of the event loop:
// documents added or removed while that runs are reflected in the finished index, a query waits for it, and the
// loop is never held for the whole build.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { DocumentLibrary } from '../daemon/documents/index.js';
import { noRedactions } from '../daemon/scrub/index.js';
import { openStore } from '../daemon/store/index.js';

const quiet = { info: () => {}, warn: () => {} };

t.test('a rebuilt lexical index takes in what changed during the build', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sov-lexical-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const options = { chunksPerDocument: 1000, documentsPerKnowledgeBase: 10_000, vectorsDir: join(dir, 'vectors'), log: quiet };
  const add = (library: DocumentLibrary, content: string) =>
    library.add('p1', { knowledgeBase: 'kb', content, filename: null, metadata: null, redactions: noRedactions() });

  let store = openStore(dir);
  let library = new DocumentLibrary(store, options);
  await library.open();
  // 3,000 one-chunk documents: several slices of the build.
  for (let i = 0; i < 3000; i++) await add(library, `Record ${i} about branch operations and routine filing number ${i}.`);
  const doomed = await add(library, 'The zeppelin maintenance manual for the hangar.');
  await library.close();
  await store.close();

  // Opening builds the index at once, in slices: timers keep firing meanwhile.
  store = openStore(dir);
  library = new DocumentLibrary(store, options);
  let turns = 0;
  const ticker = setInterval(() => turns++, 0);
  await library.open();
  clearInterval(ticker);
  t.ok(turns >= 2, `the event loop kept turning during the build (${turns} timer turns)`);
  await library.close();
  await store.close();

  store = openStore(dir);
  library = new DocumentLibrary(store, options);
  const opened = library.open();
  // While the build runs: one document added, one removed, and a query that must wait for the build.
  const added = await add(library, 'The zeppelin arrives at the Riyadh hangar on Sunday.');
  t.ok(await library.remove('p1', doomed.id), 'removed during the build');
  const during = library.search('p1', 'kb', 'zeppelin hangar', 5);
  await opened;
  const hits = (await during).hits;
  t.same(
    hits.map((h) => h.documentId),
    [added.id],
    'the document added during the build is found; the one removed is not',
  );
  t.equal((await library.search('p1', 'kb', 'record 2999 filing', 1)).hits[0]?.text.includes('Record 2999'), true, 'old chunks indexed');
  await library.close();
  await store.close();
});
