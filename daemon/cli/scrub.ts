// `sovereign scrub`: stdin → stdout with personal data replaced, for operators cleaning a file before sharing it.
// Streamed, so files of any size go through in constant memory (a value cut between two reads is still found). One
// session for the whole input, so a value gets the same placeholder everywhere in the file.
import { createInterface } from 'node:readline';
import { ScrubSession, StreamScrubber } from '../scrub/index.js';
import { parse, UsageError } from './args.js';

export const SCRUB_HELP = `Usage: sovereign scrub [--jsonl]

Reads text on stdin and writes it to stdout with Saudi national IDs, Iqama numbers, IBANs and card numbers
replaced by placeholders ([NATIONAL_ID], [IQAMA], [IBAN], [CARD]; [IBAN_2] for a second distinct IBAN, …).
Everything else is written byte for byte.

  --jsonl     read one JSON object {"text": …} per line and write one per line:
              {"text": scrubbed, "redactions": [{"type", "start", "end"}]}
              (start and end are JavaScript string indices into the input text)
  -h, --help  this help`;

export async function scrubCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, { jsonl: { type: 'boolean' } });
  if (values.help) {
    process.stdout.write(`${SCRUB_HELP}\n`);
    return 0;
  }
  if (positionals.length) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  const session = new ScrubSession();
  const write = (s: string) =>
    !s || process.stdout.write(s) ? Promise.resolve() : new Promise<void>((r) => process.stdout.once('drain', () => r()));
  if (!values.jsonl) {
    // As a stream: the output is the input byte for byte (line endings included) except for the values replaced.
    const stream = new StreamScrubber(session);
    process.stdin.setEncoding('utf8');
    for await (const piece of process.stdin) await write(stream.push(piece as string));
    await write(stream.end());
    return 0;
  }
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  let lineNumber = 0;
  for await (const line of lines) {
    lineNumber++;
    if (!line.trim()) continue;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      throw new UsageError(`line ${lineNumber} is not JSON; --jsonl expects {"text": …} on every line`);
    }
    const text = (record as { text?: unknown } | null)?.text;
    if (typeof text !== 'string') throw new UsageError(`line ${lineNumber} has no string "text"`);
    const redactions = session.find(text).map((r) => ({ type: r.type, start: r.start, end: r.end }));
    await write(`${JSON.stringify({ text: session.scrub(text), redactions })}\n`);
  }
  return 0;
}
