// A call naming a model the daemon does not serve records the name it sent (docs/audit.md, `call`): client text in
// the log, so scrubbed as a prompt is and cut to 256 characters. Only the first 1,024 characters are read; a value
// those cut in two must not reach the log in part (a national ID less its check digit is the whole ID).
import t from 'tap';
import { loggedModelName, LOGGED_MODEL_NAME } from '../daemon/http/stages/audit.js';

const NATIONAL_ID = '1012345672';
const IBAN = 'SA4420000001234567891234';
// A card number with zero-width spaces between its digits: about 900 characters that scrub to '[CARD]'.
const STUFFED_CARD = '4111111111111111'.split('').join('\u200b'.repeat(60));

t.test('a value cut by the 1,024 characters read is not recorded in part', async (t) => {
  for (const [label, value] of [
    ['national ID', NATIONAL_ID],
    ['IBAN', IBAN],
  ] as const) {
    // All but the value's last character lies within the characters read; scrubbed, what precedes it is short.
    const pad = 1024 - STUFFED_CARD.length - 1 - (value.length - 1);
    const name = loggedModelName(`${STUFFED_CARD} ${'m'.repeat(pad)}${value}${'x'.repeat(50)}`);
    t.ok(name.length <= LOGGED_MODEL_NAME);
    t.match(name, /^\[CARD\] m+/, `${label}: what precedes it is recorded`);
    t.notMatch(name, value.slice(-9, -1), `${label}: no part of it is`);
  }
});

t.test('names within what is read are scrubbed whole, then cut', async (t) => {
  t.equal(loggedModelName(`model-${NATIONAL_ID}`), 'model-[NATIONAL_ID]');
  t.equal(loggedModelName(`${'m'.repeat(250)}-${NATIONAL_ID}-${'x'.repeat(300)}`), `${'m'.repeat(250)}-[NATI`);
  t.equal(loggedModelName('m'.repeat(5_000)), 'm'.repeat(256), 'a long name without digits: its first 256 characters');
  t.equal(loggedModelName('a\u0000b\n\u202ec'), 'a\u0000b\n\u202ec', 'control characters are kept (canonical JSON escapes them)');
});

t.test('a cut never leaves half a character', async (t) => {
  const name = loggedModelName(`${'m'.repeat(255)}😀${'x'.repeat(10)}`);
  t.equal(name, 'm'.repeat(255), 'the emoji the cut would split is left out whole');
  t.notOk(/[\ud800-\udbff]$/.test(name));
});
