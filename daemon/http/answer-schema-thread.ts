// The thread that checks structured answers against their schemas (answer-schema.ts): one check at a time, sent as a
// message. The schema is the client's: its patterns run here, where one that backtracks for hours stalls nothing but
// this thread, which is ended at the check's budget.
import { parentPort } from 'node:worker_threads';
import { Ajv, type ValidateFunction } from 'ajv';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { Ajv2020 } from 'ajv/dist/2020.js';

export interface SchemaCheck {
  id: number;
  schema: Record<string, unknown>;
  answer: string;
  /** Strict: an answer that is not JSON, or a schema that cannot be read, does not match either. */
  strict: boolean;
}

/** Whether the answer matches; if not, why (ajv's first error: where in the answer, and what the schema wanted). */
export interface SchemaVerdict {
  matches: boolean;
  /** Why the answer does not match (null when it does, or when the schema is the problem). */
  problem: string | null;
  /** Why the schema could not be read (strict only: a lenient check lets the answer through). */
  unreadable: string | null;
}

export type SchemaCheckReply = { id: number; verdict: SchemaVerdict } | { ready: true };

const options = { strict: false, allErrors: false, validateFormats: false };
// By the draft the schema names (zod 4 and pydantic write 2020-12's `$schema`); draft-07 when it names none.
const checkers = { draft7: new Ajv(options), 2019: new Ajv2019(options), 2020: new Ajv2020(options) };

function checkerFor(schema: Record<string, unknown>): Ajv {
  const draft = typeof schema.$schema === 'string' ? schema.$schema : '';
  if (draft.includes('2020-12')) return checkers[2020];
  if (draft.includes('2019-09')) return checkers[2019];
  return checkers.draft7;
}

/**
 * Whether the answer matches the schema. Lenient (not strict): an answer that is not JSON, or a schema the checker
 * cannot read, matches (there is nothing to hold the answer to).
 */
function verdict(schema: Record<string, unknown>, answer: string, strict: boolean): SchemaVerdict {
  let value: unknown;
  try {
    value = JSON.parse(answer);
  } catch {
    return strict ? { matches: false, problem: 'the answer is not complete JSON', unreadable: null } : MATCHES;
  }
  let validate: ValidateFunction;
  const checker = checkerFor(schema);
  try {
    validate = checker.compile(schema);
  } catch (err) {
    return strict ? { matches: false, problem: null, unreadable: (err as Error).message } : MATCHES;
  } finally {
    // Compiled schemas are cached by the schema object: each check brings its own.
    checker.removeSchema(schema);
  }
  if (validate(value)) return MATCHES;
  const first = validate.errors?.[0];
  const problem = first ? `${first.instancePath || 'the answer'} ${first.message ?? 'does not match'}` : 'it does not match';
  return { matches: false, problem, unreadable: null };
}

const MATCHES: SchemaVerdict = { matches: true, problem: null, unreadable: null };

parentPort!.on('message', ({ id, schema, answer, strict }: SchemaCheck) => {
  parentPort!.postMessage({ id, verdict: verdict(schema, answer, strict) } satisfies SchemaCheckReply);
});
// Loaded and listening: the first check's budget starts now, not while the thread and ajv load.
parentPort!.postMessage({ ready: true } satisfies SchemaCheckReply);
