// Every string the pages show comes from a message file; Arabic switches the whole page to right-to-left.
import ar from './messages/ar.json';
import en from './messages/en.json';

export type Lang = 'en' | 'ar';
export type MessageKey = keyof typeof en;

const catalogs: Record<Lang, Record<MessageKey, string>> = { en, ar };

function initial(): Lang {
  const saved = localStorage.getItem('sovereign.lang');
  if (saved === 'ar' || saved === 'en') return saved;
  return navigator.language.startsWith('ar') ? 'ar' : 'en';
}

let lang: Lang = initial();

export function currentLang(): Lang {
  return lang;
}

export function applyLang(next: Lang): void {
  lang = next;
  localStorage.setItem('sovereign.lang', next);
  document.documentElement.lang = next;
  document.documentElement.dir = next === 'ar' ? 'rtl' : 'ltr';
  document.title = t('app.title');
}

/** The message in the current language, with {name} replaced by vars.name. */
export function t(key: MessageKey, vars: Record<string, string | number> = {}): string {
  const text = catalogs[lang][key] ?? en[key];
  return text.replace(/\{(\w+)\}/g, (_, name: string) => String(vars[name] ?? `{${name}}`));
}

export function formatDate(iso: string | null): string {
  if (!iso) return t('common.never');
  return new Intl.DateTimeFormat(lang === 'ar' ? 'ar-SA-u-nu-latn' : 'en-GB', { dateStyle: 'medium', timeStyle: 'short' }).format(
    new Date(iso),
  );
}
