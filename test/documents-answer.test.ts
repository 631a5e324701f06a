// The prompt that asks a chat model to answer from retrieved passages: in the question's language, passages numbered
// as the citations are, and never more than the model's context holds with room for the answer.
import t from 'tap';
import { answerPrompt, type Hit } from '../daemon/documents/index.js';

const hit = (n: number, text: string): Hit => ({ documentId: `doc_${n}`, filename: `file-${n}.txt`, chunk: n, score: 1 / (n + 1), text });
const bytes = (s: string) => Buffer.byteLength(s, 'utf8');

t.test('the instructions are in the language of the question', async (t) => {
  const hits = [hit(0, 'The branch opens at eight.'), hit(1, 'يفتح الفرع في الثامنة.')];
  const english = answerPrompt('When does the branch open?', hits, 8192, 512);
  t.equal(english.language, 'en');
  t.match(english.messages[0], { role: 'system', content: /Answer in English\./ });
  t.match(english.messages[1].content, /\[1\] \(file-0\.txt, part 1\)\nThe branch opens at eight\./);
  t.match(english.messages[1].content, /\[2\] \(file-1\.txt, part 2\)\nيفتح الفرع/);
  t.match(english.messages[1].content, /Question: When does the branch open\?$/);

  const arabic = answerPrompt('متى يفتح الفرع؟', hits, 8192, 512);
  t.equal(arabic.language, 'ar');
  t.match(arabic.messages[0].content, /أجب باللغة العربية/);
  t.match(arabic.messages[1].content, /السؤال: متى يفتح الفرع؟$/);
  t.equal(arabic.quoted, 2);
});

t.test('passages are quoted in rank order while they fit the context', async (t) => {
  const long = (n: number) => hit(n, `Passage ${n}. ` + 'word '.repeat(150));
  const hits = [long(0), long(1), long(2), long(3), long(4)];
  const roomy = answerPrompt('what do the passages say', hits, 100_000, 512);
  t.equal(roomy.quoted, 5);

  const tight = answerPrompt('what do the passages say', hits, 2048, 256);
  t.ok(tight.quoted >= 1 && tight.quoted < 5, `only some passages fit (${tight.quoted})`);
  const used = tight.messages.reduce((sum, m) => sum + bytes(m.content), 0);
  t.ok(used <= 2048 - 256, `the prompt (${used} bytes, an upper bound of its tokens) leaves room for the answer`);
  t.match(tight.messages[1].content, /Passage 0\./, 'the best passage comes first');
  t.notMatch(tight.messages[1].content, new RegExp(`Passage ${tight.quoted}\\.`), 'later passages are left out, not cut');

  const tiny = answerPrompt('what do the passages say', hits, 900, 256);
  t.equal(tiny.quoted, 1, 'in a small context the best passage is quoted in part');
  t.match(tiny.messages[1].content, /Passage 0\. (word )+.*…/);
  t.ok(tiny.messages.reduce((sum, m) => sum + bytes(m.content), 0) <= 900 - 256);

  t.equal(answerPrompt('what do the passages say', hits, 300, 256).quoted, 0, 'nothing is quoted when nothing useful fits');
});
