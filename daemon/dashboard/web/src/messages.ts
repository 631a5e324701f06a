// The pure half of the page's messages: catalog lookup, plural selection, placeholders and number formatting for a
// given locale. No DOM and no storage, so test/dashboard-messages.test.ts checks the catalogs through it in Node;
// i18n.ts binds it to the language the user chose and the browser's locales.

export type Lang = 'en' | 'ar';

/** A message with a count: one text per CLDR plural category the language uses (`other` always). */
export type PluralForms = Partial<Record<Intl.LDMLPluralRule, string>> & { other: string };
export type Message = string | PluralForms;
export type Catalog = Record<string, Message>;
export type Vars = Record<string, string | number>;

const PLACEHOLDER = /\{(\w+)\}/g;

export function isPlural(message: Message): message is PluralForms {
  return typeof message === 'object';
}

/** The placeholder names a message uses, in any of its forms, sorted. */
export function placeholders(message: Message): string[] {
  const texts = isPlural(message) ? Object.values(message) : [message];
  return [...new Set(texts.flatMap((text) => [...(text ?? '').matchAll(PLACEHOLDER)].map((m) => m[1]!)))].sort();
}

/** The form of a plural message Intl.PluralRules picks for `count` in `locale` (`other` when the form is missing). */
export function pluralForm(message: PluralForms, count: number, locale: string): string {
  return message[new Intl.PluralRules(locale).select(count)] ?? message.other;
}

/**
 * The message with its placeholders filled, numbers formatted for `locale`. A plural message's form is chosen by
 * `vars.count`. A variable the message needs and `vars` lacks renders as nothing, and `onMissing` hears of it: a raw
 * `{name}` must never reach the page.
 */
export function render(message: Message, vars: Vars, locale: string, onMissing: (name: string) => void = () => {}): string {
  let text: string;
  if (!isPlural(message)) text = message;
  else if (typeof vars.count === 'number') text = pluralForm(message, vars.count, locale);
  else {
    onMissing('count');
    text = message.other;
  }
  return text.replace(PLACEHOLDER, (_, name: string) => {
    const value = vars[name];
    if (value === undefined) {
      onMissing(name);
      return '';
    }
    return typeof value === 'number' ? formatNumber(value, locale) : value;
  });
}

/**
 * The locale that numbers and dates of `lang` are written in. Arabic takes the browser's own Arabic locale, whose
 * numbering system (Arabic-Indic in ar-EG or ar-SA, Latin in ar-MA) is what its user reads; someone who switched to
 * Arabic from a browser in another language keeps Latin digits. English takes the browser's English locale.
 */
export function localeFor(lang: Lang, browserLanguages: readonly string[]): string {
  const own = browserLanguages.find((l) => l.toLowerCase() === lang || l.toLowerCase().startsWith(`${lang}-`));
  if (own && Intl.NumberFormat.supportedLocalesOf(own).length) return own;
  return lang === 'ar' ? 'ar-SA-u-nu-latn' : 'en-GB';
}

export function formatNumber(n: number, locale: string, opts: Intl.NumberFormatOptions = {}): string {
  return new Intl.NumberFormat(locale, opts).format(n);
}

const BYTE_UNITS = ['byte', 'kilobyte', 'megabyte', 'gigabyte', 'terabyte'] as const;

/** A size in bytes with the largest decimal unit (kB = 1000 B, as Intl names them) that keeps it at 1 or more. */
export function formatBytes(n: number, locale: string): string {
  let i = 0;
  while (Math.abs(n) >= 1000 && i < BYTE_UNITS.length - 1) {
    n /= 1000;
    i++;
  }
  // Short "byte" is the same for one and many ("512 byte"); the long form agrees with the number.
  const unitDisplay = i ? 'short' : 'long';
  return formatNumber(n, locale, { style: 'unit', unit: BYTE_UNITS[i], unitDisplay, maximumFractionDigits: i ? 1 : 0 });
}

const DURATION_UNITS = [
  ['day', 86_400],
  ['hour', 3_600],
  ['minute', 60],
  ['second', 1],
] as const;

/** A duration in its largest whole unit: "3 min", "2 hr", "5 days"; in Arabic the long forms, which agree with the number. */
export function formatDuration(seconds: number, locale: string): string {
  const [unit, size] = DURATION_UNITS.find(([, s]) => Math.abs(seconds) >= s) ?? DURATION_UNITS[3];
  // Arabic's short units ("٣ د") drop the noun's number agreement; the long ones keep it ("دقيقتان", "٣ دقائق").
  const unitDisplay = locale.startsWith('ar') ? 'long' : 'short';
  return formatNumber(seconds / size, locale, { style: 'unit', unit, unitDisplay, maximumFractionDigits: 0 });
}
