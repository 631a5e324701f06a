// A batch input file as uploaded: JSON Lines, each `{"custom_id", "method": "POST", "url", "body"}`. Checked whole
// before anything is stored, so a batch never meets a line it cannot run: the first line that is wrong is refused
// with a 400 naming it and what is wrong. The work is done in turns with the calls the event loop serves.
import { ApiError } from '../errors/index.js';
import { MAX_SCHEMA_DEPTH, ScrubSession, type BodyKind, type RedactionType } from '../scrub/index.js';

/** The endpoints a batch line may name, and what each one's body is to the scrubber. */
export const BATCH_URLS = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completion',
  '/v1/responses': 'responses',
  '/v1/embeddings': 'embeddings',
} as const satisfies Record<string, BodyKind>;

export type BatchUrl = keyof typeof BATCH_URLS;

export function isBatchUrl(url: unknown): url is BatchUrl {
  return typeof url === 'string' && Object.hasOwn(BATCH_URLS, url);
}

/** One line of an input file, checked. */
export interface BatchLine {
  custom_id: string;
  method: 'POST';
  url: BatchUrl;
  body: Record<string, unknown>;
}

export interface ParseOptions {
  maxLines: number;
  /** The largest body a line may carry: what the endpoint itself accepts (limits.bodyBytes). */
  maxBodyBytes: number;
  /** The endpoint's own check of a body (its request schema): null when it passes, else what is wrong, naming the field. */
  checkBody: (url: BatchUrl, body: unknown) => string | null;
}

const MAX_CUSTOM_ID = 512;
/** How long the work runs before it lets the event loop serve other calls. */
const TURN_MS = 10;

const TYPE_NAMES: Record<RedactionType, string> = {
  NATIONAL_ID: 'a national ID',
  IQAMA: 'an Iqama number',
  IBAN: 'an IBAN',
  CARD: 'a card number',
};

/** A 400 naming the file's line (1-based, as an editor counts). */
export function lineError(line: number, what: string): ApiError {
  return new ApiError('invalid_request_error', `Line ${line} of the file: ${what}`, { param: 'file' });
}

/** Lets the event loop serve other calls once the work has held it for TURN_MS. */
export function turns(): () => Promise<void> | undefined {
  let since = Date.now();
  return () => {
    if (Date.now() - since < TURN_MS) return undefined;
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        since = Date.now();
        resolve();
      }),
    );
  };
}

/** The file's lines, checked; 400 naming the first line that is wrong. Blank lines are skipped (their numbers count). */
export async function parseBatchFile(bytes: Uint8Array, options: ParseOptions): Promise<Array<{ number: number; line: BatchLine }>> {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new ApiError('invalid_request_error', 'The file is not UTF-8 text: a batch input file is JSON Lines (.jsonl), in UTF-8.', {
      param: 'file',
    });
  }
  const rows = text.split('\n');
  const out: Array<{ number: number; line: BatchLine }> = [];
  const seen = new Map<string, number>();
  const finder = new ScrubSession();
  const turn = turns();
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!.endsWith('\r') ? rows[i]!.slice(0, -1) : rows[i]!;
    if (!row.trim()) continue;
    const number = i + 1;
    if (out.length === options.maxLines) {
      throw new ApiError(
        'invalid_request_error',
        `The file has more than ${options.maxLines} requests (batches.maxLines), the most one batch may hold; line ${number} is past it. Split it into several files and batches.`,
        { param: 'file' },
      );
    }
    const line = checkLine(row, number, seen, finder, options);
    out.push({ number, line });
    await turn();
  }
  if (!out.length)
    throw new ApiError('invalid_request_error', 'The file has no requests: send one JSON object per line.', { param: 'file' });
  return out;
}

function checkLine(row: string, number: number, seen: Map<string, number>, finder: ScrubSession, options: ParseOptions): BatchLine {
  let parsed: unknown;
  try {
    parsed = JSON.parse(row);
  } catch (err) {
    throw lineError(number, `it is not JSON (${(err as Error).message.slice(0, 160)}). Each line must be one JSON object.`);
  }
  if (!isObject(parsed)) throw lineError(number, 'it is not a JSON object. Each line must be {"custom_id", "method", "url", "body"}.');
  const { custom_id: customId, method, url, body } = parsed;
  if (typeof customId !== 'string' || !customId.length) {
    throw lineError(
      number,
      'custom_id is missing or not a string. Give every line a custom_id of its own: the output names each answer by it.',
    );
  }
  if (customId.length > MAX_CUSTOM_ID) throw lineError(number, `custom_id is longer than ${MAX_CUSTOM_ID} characters.`);
  const found = finder.find(customId)[0];
  if (found) {
    throw lineError(
      number,
      `custom_id holds what looks like ${TYPE_NAMES[found.type]}; it is kept and answered back as it is, so it cannot be scrubbed. Use a label without personal data.`,
    );
  }
  const earlier = seen.get(customId);
  if (earlier !== undefined) {
    throw lineError(number, `custom_id '${customId}' is already the custom_id of line ${earlier}. Each line needs its own.`);
  }
  seen.set(customId, number);
  if (method !== 'POST') throw lineError(number, `method must be "POST" (got ${JSON.stringify(method) ?? 'nothing'}).`);
  if (!isBatchUrl(url)) {
    throw lineError(
      number,
      `url ${JSON.stringify(url) ?? 'is missing and'} is not an endpoint a batch runs; use one of ${Object.keys(BATCH_URLS).join(', ')}.`,
    );
  }
  if (!isObject(body)) throw lineError(number, 'body must be a JSON object: the request the endpoint is sent.');
  // Measured without recursion: what walks the body later (the schema check, the scrubber, JSON.stringify) recurses,
  // and a body nested deep enough would exhaust the stack there, a 500 for what is the client's to fix.
  if (depthPast(body, MAX_SCHEMA_DEPTH)) {
    throw lineError(number, `body is nested more than ${MAX_SCHEMA_DEPTH} levels deep; flatten it.`);
  }
  if (body.stream === true) throw lineError(number, 'body.stream is true; a batch line is answered whole. Leave out stream.');
  if (Buffer.byteLength(row) > options.maxBodyBytes) {
    throw lineError(number, `it is larger than the ${options.maxBodyBytes} bytes a request may have (limits.bodyBytes).`);
  }
  const problem = options.checkBody(url, body);
  if (problem) throw lineError(number, problem);
  const tokens = tokenField(url, body);
  if (tokens) {
    throw lineError(
      number,
      `body.${tokens} holds token ids, which cannot be scrubbed before the file is stored (only text can be). Send the text.`,
    );
  }
  return { custom_id: customId, method: 'POST', url, body };
}

/** The field of a body that holds token ids instead of text, if any: the stored file would keep them unscrubbed. */
function tokenField(url: BatchUrl, body: Record<string, unknown>): string | null {
  const field = url === '/v1/embeddings' ? 'input' : url === '/v1/completions' ? 'prompt' : null;
  if (!field) return null;
  const value = body[field];
  if (!Array.isArray(value)) return null;
  return value.some((item) => typeof item !== 'string') ? field : null;
}

/** Whether `value` holds arrays or objects nested more than `max` levels deep (iterative: any depth is measured). */
function depthPast(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length) {
    const [item, depth] = stack.pop()!;
    if (item === null || typeof item !== 'object') continue;
    if (depth > max) return true;
    for (const child of Object.values(item)) stack.push([child, depth + 1]);
  }
  return false;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
