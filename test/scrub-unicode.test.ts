// The scrubber's Unicode tables (daemon/scrub/unicode-tables.ts) are generated from the running Node's ICU by
// scripts/unicode-tables.mjs: they must match it, and they must hold what the scrubber relies on.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import t from 'tap';
import { digitValue, isInvisible } from '../daemon/scrub/characters.js';
import { ROOT } from './helpers/daemon.js';

t.test('the tables match this Node.js', async (t) => {
  const check = spawnSync(process.execPath, [join(ROOT, 'scripts', 'unicode-tables.mjs'), '--check'], { encoding: 'utf8' });
  t.equal(check.status, 0, check.stderr || 'up to date');
});

t.test('every decimal digit, and every character NFKC folds to one, is read as its digit', async (t) => {
  let checked = 0;
  for (let cp = 0; cp <= 0x1ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const ch = String.fromCodePoint(cp);
    const folded = ch.normalize('NFKC');
    if (/^[0-9]$/.test(folded)) {
      checked++;
      if (digitValue(cp) !== Number(folded)) t.fail(`U+${cp.toString(16)} folds to ${folded} but reads as ${digitValue(cp)}`);
    } else if (/^\p{Nd}$/u.test(ch) && digitValue(cp) < 0) {
      t.fail(`U+${cp.toString(16)} is a decimal digit but is not read as one`);
    }
  }
  t.ok(checked > 100, `${checked} folding digits checked`);
  for (const mark of ['\u0301', '\u0332', '\u0336', '\u20dd', '\u064e', '\u0651'])
    t.ok(isInvisible(mark.codePointAt(0)!), `U+${mark.codePointAt(0)!.toString(16)} is seen through`);
});
