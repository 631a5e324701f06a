// The dashboard's message catalogs (daemon/dashboard/web/src/messages/*.json), checked through the pure formatter the
// page uses: both languages have the same messages with the same placeholders, a message with a count has every
// plural form its language needs and shows the right one, no placeholder is ever left unfilled, and numbers follow
// the locale (Arabic-Indic digits only for a browser whose Arabic locale asks for them).
import { readFileSync } from 'node:fs';
import t from 'tap';
import {
  formatBytes,
  formatDuration,
  formatNumber,
  isPlural,
  localeFor,
  placeholders,
  render,
  type Catalog,
  type Lang,
} from '../daemon/dashboard/web/src/messages.js';

const catalogs: Record<Lang, Catalog> = {
  en: JSON.parse(readFileSync(new URL('../daemon/dashboard/web/src/messages/en.json', import.meta.url), 'utf8')),
  ar: JSON.parse(readFileSync(new URL('../daemon/dashboard/web/src/messages/ar.json', import.meta.url), 'utf8')),
};
const LANGS: Lang[] = ['en', 'ar'];
const COUNTS = [0, 1, 2, 3, 11, 100];
/** The form each count takes, written out rather than asked of Intl.PluralRules, so a wrong selection shows. */
const EXPECTED: Record<Lang, Intl.LDMLPluralRule[]> = {
  en: ['other', 'one', 'other', 'other', 'other', 'other'],
  ar: ['zero', 'one', 'two', 'few', 'many', 'other'],
};
/**
 * English messages that are not plural though a placeholder is followed by a word ending in s, and why. The guard
 * below exists because "{count} entries" once showed as "1 entries".
 */
const NOT_PLURAL_NOUNS: Record<string, string> = {
  'keys.rotateMessage': '"{id} gets a new secret": a verb after a key id',
  'units.ms': '"{value} ms": an abbreviation, the same for one and many',
};

t.test('both languages have the same messages, with the same placeholders', async (t) => {
  t.same(Object.keys(catalogs.ar).sort(), Object.keys(catalogs.en).sort(), 'the same keys');
  const differ = Object.entries(catalogs.en).filter(([key, en]) => {
    const ar = catalogs.ar[key];
    return ar !== undefined && (placeholders(ar).join() !== placeholders(en).join() || isPlural(ar) !== isPlural(en));
  });
  t.same(
    differ.map(([key]) => key),
    [],
    'the same placeholders, and plural in both or in neither',
  );
});

for (const lang of LANGS) {
  t.test(`${lang}: plural messages have each form the language uses, and are chosen by {count}`, async (t) => {
    const categories = [...new Intl.PluralRules(lang).resolvedOptions().pluralCategories].sort().join();
    t.same(
      COUNTS.map((n) => new Intl.PluralRules(lang).select(n)),
      EXPECTED[lang],
      'Intl.PluralRules agrees with the table',
    );
    const plurals = Object.entries(catalogs[lang]).filter(([, message]) => isPlural(message));
    t.ok(plurals.length > 0, 'there are plural messages');
    t.same(
      plurals.filter(([, m]) => Object.keys(m).sort().join() !== categories).map(([key]) => key),
      [],
      'every form, and no other',
    );
    t.same(
      plurals.filter(([, m]) => !placeholders(m).includes('count')).map(([key]) => key),
      [],
      'a {count} chooses the form',
    );
  });

  t.test(`${lang}: every message rendered with counts leaves no placeholder and shows the right form`, async (t) => {
    const locale = localeFor(lang, []);
    const problems: string[] = [];
    for (const [key, message] of Object.entries(catalogs[lang])) {
      COUNTS.forEach((n, i) => {
        const vars = Object.fromEntries([...placeholders(message), 'count'].map((name) => [name, n]));
        const text = render(message, vars, locale, (name) => problems.push(`${key} (${n}): {${name}} not given`));
        if (/[{}]/.test(text)) problems.push(`${key} (${n}): a brace left in "${text}"`);
        const form = EXPECTED[lang][i];
        if (isPlural(message) && text !== render(message[form] ?? '', vars, locale)) {
          problems.push(`${key} (${n}): "${text}" is not the ${form} form`);
        }
      });
    }
    t.same(problems, []);
  });
}

t.test('en: no count is followed by a plural noun outside a plural message', async (t) => {
  const suspect = Object.entries(catalogs.en).filter(
    ([key, message]) => !isPlural(message) && !(key in NOT_PLURAL_NOUNS) && /\{\w+\} [a-z]+s\b/.test(message),
  );
  t.same(suspect, [], 'make these plural messages, or list them with a reason');
  t.same(
    Object.keys(NOT_PLURAL_NOUNS).filter((key) => !(key in catalogs.en)),
    [],
    'every exception is still in use',
  );
});

t.test('a variable left out renders as nothing and is reported', async (t) => {
  const reported: string[] = [];
  t.equal(
    render('Entry {leaf} of {size}', { size: 3 }, 'en', (name) => reported.push(name)),
    'Entry  of 3',
  );
  t.equal(
    render({ one: '{count} entry', other: '{count} entries' }, {}, 'en', (name) => reported.push(name)),
    ' entries',
  );
  t.same(reported, ['leaf', 'count', 'count']);
});

t.test('numbers in the locale: Arabic-Indic digits only where the browser’s Arabic locale asks for them', async (t) => {
  t.equal(formatNumber(1234, localeFor('ar', ['ar-EG', 'en'])), '١٬٢٣٤', 'an Egyptian browser');
  t.equal(formatNumber(1234, localeFor('ar', ['en-US', 'ar-SA'])), '١٬٢٣٤', 'a Saudi locale, not the first');
  t.equal(formatNumber(1234, localeFor('ar', ['en-US'])), '1,234', 'switched to Arabic from an English browser');
  t.equal(formatNumber(1234, localeFor('ar', ['ar-MA'])), '1.234', 'a Moroccan browser writes Latin digits');
  t.equal(formatNumber(1234, localeFor('en', ['ar-EG'])), '1,234', 'English from an Arabic browser');
  t.equal(
    render(catalogs.ar['audit.summary'], { count: 11, origin: 'x' }, localeFor('ar', ['ar-SA'])),
    '١١ مدخلًا في السجل x، بتوقيع المفتاح',
  );
  t.equal(formatDuration(180, 'en-US'), '3 min');
  t.equal(formatDuration(7200, 'en-US'), '2 hr');
  t.equal(formatDuration(5 * 86_400, 'en-US'), '5 days');
  t.equal(formatDuration(120, 'ar-EG'), 'دقيقتان', 'Arabic units agree with the number');
  t.equal(formatBytes(512, 'en-US'), '512 bytes');
  t.equal(formatBytes(1_250_000, 'en-US'), '1.3 MB');
  t.equal(formatBytes(3e9, 'ar-EG'), '٣ غ.ب');
});
