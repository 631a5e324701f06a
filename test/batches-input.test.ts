// A batch input file's lines as the parser checks them, on their own: a body nested past what the scrubber walks is
// the client's to fix (400 naming the line), not the daemon's failure.
import t from 'tap';
import { parseBatchFile } from '../daemon/batches/index.js';
import { ApiError } from '../daemon/errors/index.js';

const options = { maxLines: 10, maxBodyBytes: 4 << 20, checkBody: () => null };
const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);

t.test('a body nested a hundred thousand levels deep is 400 naming its line', async (t) => {
  const line = (extra: string) =>
    `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[],"foo":${extra}}}`;
  const file = Buffer.from(`${line('1')}\n${line(deep(100_000))}\n`.replace('"a"', '"first"'));
  const err = await parseBatchFile(file, options).then(
    () => null,
    (e: unknown) => e,
  );
  t.ok(err instanceof ApiError, 'refused with an API error');
  t.equal((err as ApiError).status, 400);
  t.match((err as ApiError).message, /^Line 2 of the file: .*nested more than \d+ levels/);
});
