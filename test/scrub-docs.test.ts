// docs/scrubbing.md's examples against the real scrubber: an operator who copies an example off the page must see
// what the page says. Each row of its Examples table is scrubbed and compared; the value a row names must be one the
// scrubber replaces on its own (so an example "left alone" is left alone for the reason the page gives, not because
// its number fails its check digit), and every code span on the page that holds ten digits or more must be a row.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { ScrubSession } from '../daemon/scrub/index.js';
import { ROOT } from './helpers/daemon.js';

const PAGE = join(ROOT, 'docs', 'scrubbing.md');
const LEFT_ALONE = 'left alone';

interface Example {
  text: string;
  /** The values the text holds, each replaced when it stands alone; empty for a row whose value is `—`. */
  values: string[];
  /** What scrubbing the text gives; null: the text itself. */
  scrubbed: string | null;
}

const codeSpans = (markdown: string) => [...markdown.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]);

/** A table row's cells; a `|` inside a code span is not a cell's end. */
function cells(row: string): string[] {
  const out: string[] = [];
  let cell = '';
  let inCode = false;
  for (const ch of row.trim().replace(/^\||\|$/g, '')) {
    if (ch === '`') inCode = !inCode;
    if (ch === '|' && !inCode) {
      out.push(cell.trim());
      cell = '';
    } else cell += ch;
  }
  out.push(cell.trim());
  return out;
}

/** The page split at its Examples section: the rest of the page, and the section's rows. */
function readPage(markdown: string): { prose: string; examples: Example[]; problems: string[] } {
  const start = markdown.indexOf('\n## Examples\n');
  if (start < 0) return { prose: markdown, examples: [], problems: ['the page has no "## Examples" section'] };
  const next = markdown.indexOf('\n## ', start + 1);
  const section = markdown.slice(start, next < 0 ? undefined : next);
  const prose = markdown.slice(0, start) + (next < 0 ? '' : markdown.slice(next));
  const problems: string[] = [];
  const examples: Example[] = [];
  for (const line of section.split('\n').filter((l) => l.startsWith('| `'))) {
    const [text, values, scrubbed] = cells(line);
    const [example] = codeSpans(text ?? '');
    if (example === undefined || values === undefined || scrubbed === undefined) {
      problems.push(`a row that is not "| \`example\` | value | scrubbed |": ${line}`);
      continue;
    }
    const result = scrubbed.startsWith(LEFT_ALONE) ? null : codeSpans(scrubbed)[0];
    if (result === undefined) {
      problems.push(`${example}: the scrubbed cell is neither a code span nor "${LEFT_ALONE}"`);
      continue;
    }
    examples.push({ text: example, values: values === '—' ? [] : codeSpans(values), scrubbed: result });
  }
  return { prose, examples, problems };
}

/** A decimal digit of any script as its ASCII digit: Unicode puts each script's ten digits in a row, 0 first. */
function asciiDigit(ch: string): string {
  let cp = ch.codePointAt(0)!;
  let value = 0;
  while (/\p{Nd}/u.test(String.fromCodePoint(cp - 1)) && value < 9) {
    cp--;
    value++;
  }
  return String(value);
}

/** Letters and digits only, digits in ASCII: what a value reads as, whatever separates or writes its digits. */
const alphanumerics = (text: string) =>
  [...text]
    .filter((ch) => /[\p{Nd}A-Za-z]/u.test(ch))
    .map((ch) => (/\p{Nd}/u.test(ch) ? asciiDigit(ch) : ch.toUpperCase()))
    .join('');

const digitCount = (text: string) => [...text].filter((ch) => /\p{Nd}/u.test(ch)).length;

/** Everything the page gets wrong about the scrubber; empty when every example is as it says. */
function pageProblems(markdown: string): string[] {
  const { prose, examples, problems } = readPage(markdown);
  const rows = new Set(examples.map((e) => e.text));
  for (const span of new Set(codeSpans(prose))) {
    if (digitCount(span) >= 10 && !rows.has(span)) problems.push(`${span}: an example not in the Examples table`);
  }
  for (const { text, values, scrubbed } of examples) {
    for (const value of values) {
      const alone = new ScrubSession().scrub(value);
      if (!/^\[[A-Z_]+\]$/.test(alone)) problems.push(`${text}: its value ${value} is not replaced on its own (gives ${alone})`);
      if (!alphanumerics(text).includes(alphanumerics(value))) problems.push(`${text}: does not hold its value ${value}`);
    }
    if (values.length === 0 && scrubbed !== null) problems.push(`${text}: scrubbed to ${scrubbed}, yet the row names no value`);
    const got = new ScrubSession().scrub(text);
    const want = scrubbed ?? text;
    if (got !== want) problems.push(`${text}: the page says ${scrubbed ?? LEFT_ALONE}, the scrubber gives ${got}`);
  }
  return problems;
}

const page = readFileSync(PAGE, 'utf8');

t.test('every example in docs/scrubbing.md is scrubbed as the page says', async (t) => {
  const { examples } = readPage(page);
  t.ok(examples.length >= 30, `the Examples table has its rows (${examples.length})`);
  for (const type of ['[NATIONAL_ID]', '[IQAMA]', '[IBAN]', '[CARD]']) {
    t.ok(
      examples.some((e) => e.scrubbed?.includes(type)),
      `an example of ${type}`,
    );
  }
  t.ok(
    examples.some((e) => e.scrubbed === null && e.values.length > 0),
    'examples holding a valid value that is left alone',
  );
  t.same(pageProblems(page), []);
});

t.test('an example whose number fails its check digit is caught', async (t) => {
  // The page once showed 1012345678 as an ID: it fails the Luhn check, so the scrubber leaves it, whatever surrounds it.
  const broken = page.replaceAll('1012345672', '1012345678');
  const problems = pageProblems(broken);
  t.ok(
    problems.some((p) => p.includes('is not replaced on its own')),
    'a row naming it as its value',
  );
  t.ok(
    problems.some((p) => p.startsWith('order 1012345678: the page says')),
    'a row saying it is replaced',
  );
  // Changed in the prose alone, the example is no longer one the table checks.
  const prose = page.replace('(`ts=1012345672`)', '(`ts=1012345678`)');
  t.same(pageProblems(prose), ['ts=1012345678: an example not in the Examples table']);
});
