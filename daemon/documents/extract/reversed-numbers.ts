// Producers that write an Arabic line fully reversed for left-to-right drawing reverse its numbers too, so the page
// shows them backwards and no extractor can tell (pdf.js gives them as drawn). A national ID, Iqama number, IBAN or
// card number written that way would slip past scrubbing and reach the index. So, on lines with Arabic letters, a
// number that is no identifier as it stands but is one read backwards is turned back: scrubbing then finds it. Other
// numbers (years, amounts, reference numbers) are left as the page shows them.
import { ScrubSession } from '../../scrub/index.js';

/** Groups holding a digit (of any script; an IBAN's letters too), with single spaces or dashes between them. */
const GROUP = '[0-9A-Za-z\\u0660-\\u0669\\u06f0-\\u06f9]*[0-9\\u0660-\\u0669\\u06f0-\\u06f9][0-9A-Za-z\\u0660-\\u0669\\u06f0-\\u06f9]*';
const NUMBER = new RegExp(`${GROUP}(?:[ \\-]${GROUP})*`, 'g');
const ARABIC_LETTER = /[\u0620-\u064a\u0671-\u06d3\ufb50-\ufdff\ufe70-\ufefc]/;
const DIGIT = /[0-9\u0660-\u0669\u06f0-\u06f9]/g;
/** The shortest identifier scrubbing knows is a 10-digit ID; anything shorter cannot be one either way round. */
const MIN_DIGITS = 10;

const isIdentifier = (text: string) => new ScrubSession().find(text).length > 0;

export function restoreReversedNumbers(text: string): string {
  return text
    .split('\n')
    .map((line) =>
      ARABIC_LETTER.test(line)
        ? line.replace(NUMBER, (run) => {
            if ((run.match(DIGIT)?.length ?? 0) < MIN_DIGITS || isIdentifier(run)) return run;
            const backwards = [...run].reverse().join('');
            return isIdentifier(backwards) ? backwards : run;
          })
        : line,
    )
    .join('\n');
}
