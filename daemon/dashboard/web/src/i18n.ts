// Every string the pages show comes from a message file; Arabic switches the whole page to right-to-left. The
// formatting itself is messages.ts; this module binds it to the language chosen and the browser's locales.
import * as messages from './messages.js';
import type { Catalog, Lang, Vars } from './messages.js';
import ar from './messages/ar.json';
import en from './messages/en.json';

export type { Lang } from './messages.js';
export type MessageKey = keyof typeof en;

const catalogs: Record<Lang, Catalog> = { en, ar };

/** Keys whose English message is a set of plural forms: their callers must give `count`. */
type PluralKey = { [K in MessageKey]: (typeof en)[K] extends string ? never : K }[MessageKey];
type VarsOf<K extends MessageKey> = K extends PluralKey ? [vars: Vars & { count: number }] : [vars?: Vars];

function initial(): Lang {
  const saved = localStorage.getItem('sovereign.lang');
  if (saved === 'ar' || saved === 'en') return saved;
  return navigator.language.startsWith('ar') ? 'ar' : 'en';
}

let lang: Lang = initial();
let locale = messages.localeFor(lang, navigator.languages);

export function currentLang(): Lang {
  return lang;
}

/** The locale numbers and dates are written in (see messages.localeFor). */
export function currentLocale(): string {
  return locale;
}

export function applyLang(next: Lang): void {
  lang = next;
  locale = messages.localeFor(next, navigator.languages);
  localStorage.setItem('sovereign.lang', next);
  document.documentElement.lang = next;
  document.documentElement.dir = next === 'ar' ? 'rtl' : 'ltr';
  document.title = t('app.title');
}

const reported = new Set<string>();

/**
 * The message in the current language, with {name} replaced by vars.name (numbers formatted for the locale) and,
 * for a plural message, the form vars.count selects. A variable left out is a bug in the page: it shows as nothing,
 * and the console says which, once.
 */
export function t<K extends MessageKey>(key: K, ...[vars]: VarsOf<K>): string {
  const message = catalogs[lang][key] ?? en[key];
  return messages.render(message, vars ?? {}, locale, (name) => {
    if (reported.has(`${key} ${name}`)) return;
    reported.add(`${key} ${name}`);
    console.error(`message ${key} (${lang}) was not given {${name}}`);
  });
}

export function formatNumber(n: number, opts?: Intl.NumberFormatOptions): string {
  return messages.formatNumber(n, locale, opts);
}

export function formatBytes(n: number): string {
  return messages.formatBytes(n, locale);
}

export function formatDuration(seconds: number): string {
  return messages.formatDuration(seconds, locale);
}

export function formatDate(iso: string | null, opts: Intl.DateTimeFormatOptions = { dateStyle: 'medium', timeStyle: 'short' }): string {
  if (!iso) return t('common.never');
  return new Intl.DateTimeFormat(locale, opts).format(new Date(iso));
}
