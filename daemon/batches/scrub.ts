// A batch input file is scrubbed as it is stored, so no raw personal data reaches the disk: each line's body through
// the scrubbing its endpoint gives an interactive call (daemon/scrub/requests.ts, each line one request with a session
// of its own, large bodies in the scrubbing worker thread), then every string the endpoint's scrubbing leaves alone
// (fields no engine sees, such as chat's `user` and `metadata`: the file keeps them all the same). When the line runs,
// its endpoint scrubs it again, which changes nothing.
import { ApiError } from '../errors/index.js';
import {
  MAX_SCHEMA_DEPTH,
  noRedactions,
  NotCopyable,
  OFFLOAD_FROM,
  SCRUB_BODY,
  ScrubSession,
  scrubOffLoop,
  type RedactionCounts,
} from '../scrub/index.js';
import { BATCH_URLS, lineError, turns, type BatchLine } from './jsonl.js';

/** The lines as they are stored (JSON text, scrubbed), and what was replaced in all of them, by type. */
export async function scrubLines(
  lines: ReadonlyArray<{ number: number; line: BatchLine }>,
): Promise<{ lines: string[]; redactions: RedactionCounts }> {
  const redactions = noRedactions();
  const out: string[] = [];
  const turn = turns();
  for (const { number, line } of lines) {
    const { body, session } = await scrubBody(line, number);
    scrubRest(body, session, number);
    for (const [type, n] of Object.entries(session.counts())) redactions[type as keyof RedactionCounts] += n;
    out.push(JSON.stringify({ custom_id: line.custom_id, method: line.method, url: line.url, body }));
    await turn();
  }
  return { lines: out, redactions };
}

/** The body scrubbed as its endpoint scrubs a request (a large one in the worker thread). */
async function scrubBody(line: BatchLine, number: number): Promise<{ body: Record<string, unknown>; session: ScrubSession }> {
  const kind = BATCH_URLS[line.url];
  const here = () => {
    const session = new ScrubSession();
    SCRUB_BODY[kind](line.body, session);
    return { body: line.body, session };
  };
  try {
    if (Buffer.byteLength(JSON.stringify(line.body)) < OFFLOAD_FROM) return here();
    try {
      const { body, session } = await scrubOffLoop(kind, line.body);
      return { body: body as Record<string, unknown>, session };
    } catch (err) {
      if (err instanceof NotCopyable) return here();
      throw err;
    }
  } catch (err) {
    // A field refused (a name that holds a value) is the client's to fix; anything else fails closed.
    if (err instanceof ApiError) throw lineError(number, `body.${err.param ?? ''}: ${err.message}`);
    throw new ApiError(
      'internal_error',
      `Personal-data scrubbing failed on line ${number}, so nothing was stored. Retry; if it persists, report the X-Request-Id.`,
    );
  }
}

/**
 * Every string left in the body (values and property names) scrubbed with the line's session; a number whose digits
 * are a value is refused, since turning it into its placeholder (a string) would change what the endpoint is sent.
 */
function scrubRest(body: Record<string, unknown>, session: ScrubSession, number: number): void {
  const walk = (value: unknown, path: string, depth: number): unknown => {
    if (typeof value === 'string') return session.scrub(value);
    if (typeof value === 'number') {
      const found = session.find(String(value))[0];
      if (found) throw lineError(number, `${path} is a number that looks like personal data; the file is stored, so it cannot hold one.`);
      return value;
    }
    if (value === null || typeof value !== 'object') return value;
    if (depth >= MAX_SCHEMA_DEPTH) throw lineError(number, `${path} is nested more than ${MAX_SCHEMA_DEPTH} levels deep; flatten it.`);
    if (Array.isArray(value)) return value.map((item, i) => walk(item, `${path}[${i}]`, depth + 1));
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[session.scrub(key)] = walk(item, `${path}.${key}`, depth + 1);
    return out;
  };
  for (const [key, value] of Object.entries(body)) {
    const scrubbedKey = session.scrub(key);
    const scrubbed = walk(value, `body.${key}`, 1);
    if (scrubbedKey !== key) delete body[key];
    body[scrubbedKey] = scrubbed;
  }
}
