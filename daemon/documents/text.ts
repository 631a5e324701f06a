// Text for search, in Arabic and English: one normal form for matching (Arabic letter variants folded, diacritics
// and tatweel dropped, presentation forms unfolded, digits of every script as ASCII), and terms for the lexical
// index (words, light prefix and suffix stripping, common function words left out).

const ARABIC_DIACRITICS = /[\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed]/g;
const TATWEEL = /\u0640/g;
const FOLDS: Record<string, string> = {
  '\u0622': '\u0627', // آ → ا
  '\u0623': '\u0627', // أ → ا
  '\u0625': '\u0627', // إ → ا
  '\u0671': '\u0627', // ٱ → ا
  '\u0649': '\u064a', // ى → ي
  '\u0629': '\u0647', // ة → ه
  '\u0624': '\u0648', // ؤ → و
  '\u0626': '\u064a', // ئ → ي
  '\u06cc': '\u064a', // Persian yeh → ي
  '\u06a9': '\u0643', // Persian keheh → ك
};
const FOLDABLE = new RegExp(`[${Object.keys(FOLDS).join('')}]`, 'g');
const OTHER_DIGITS = /[\u0660-\u0669\u06f0-\u06f9]/g;

/** The form text is matched in: NFKC (which unfolds Arabic presentation forms), folded, lower case. */
export function normalizeForSearch(text: string): string {
  return text
    .normalize('NFKC')
    .replace(ARABIC_DIACRITICS, '')
    .replace(TATWEEL, '')
    .replace(FOLDABLE, (c) => FOLDS[c]!)
    .replace(OTHER_DIGITS, (d) => String((d.charCodeAt(0) - (d.charCodeAt(0) >= 0x06f0 ? 0x06f0 : 0x0660)) % 10))
    .toLowerCase();
}

const STOPWORDS = new Set(
  [
    // English function words
    'a an and are as at be but by for from has have in is it its of on or that the this to was were will with',
    // Arabic function words, in normal form
    'في من على الى عن ان او ثم هو هي هذا هذه ذلك تلك التي الذي مع كان كانت قد لا ما لم لن يا و',
  ]
    .join(' ')
    .split(' ')
    .map((w) => normalizeForSearch(w)),
);

/** Arabic prefixes stripped when what is left is still a word: the article and the conjunctions fused to it. */
const ARABIC_PREFIXES = ['وال', 'بال', 'كال', 'فال', 'لل', 'ال'].map(normalizeForSearch);
const ARABIC_LETTER = /[\u0621-\u064a]/;

function stem(word: string): string {
  if (ARABIC_LETTER.test(word)) {
    for (const prefix of ARABIC_PREFIXES) {
      if (word.startsWith(prefix) && word.length - prefix.length >= 2) return word.slice(prefix.length);
    }
    return word;
  }
  // English: plurals and possessives, enough to match "transfers" with "transfer".
  if (word.endsWith("'s")) return word.slice(0, -2);
  if (word.length > 4 && word.endsWith('ies')) return `${word.slice(0, -3)}y`;
  if (word.length > 3 && word.endsWith('s') && !word.endsWith('ss')) return word.slice(0, -1);
  return word;
}

const WORD = /[\p{L}\p{N}]+(?:'[\p{L}]+)?/gu;

/** Index terms of a text, in order (repeats kept: term frequency counts them). */
export function terms(text: string): string[] {
  const out: string[] = [];
  for (const [word] of normalizeForSearch(text).matchAll(WORD)) {
    if (STOPWORDS.has(word)) continue;
    const term = stem(word);
    if (term && !STOPWORDS.has(term)) out.push(term);
  }
  return out;
}

/** Mostly Arabic letters, or not: the language an answer should be written in. */
export function languageOf(text: string): 'ar' | 'en' {
  let arabic = 0;
  let latin = 0;
  for (const ch of text) {
    if (/[\u0600-\u06ff\u0750-\u077f\ufb50-\ufdff\ufe70-\ufeff]/.test(ch)) arabic++;
    else if (/[A-Za-z]/.test(ch)) latin++;
  }
  return arabic > latin ? 'ar' : 'en';
}
