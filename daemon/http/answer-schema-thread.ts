// The thread that checks structured answers against their schemas (answer-schema.ts): one check at a time, sent as a
// message. The schema is the client's: its patterns run here, where one that backtracks for hours stalls nothing but
// this thread, which is ended at the check's budget.
import { parentPort } from 'node:worker_threads';
import { Ajv, type ValidateFunction } from 'ajv';

export interface SchemaCheck {
  id: number;
  schema: Record<string, unknown>;
  answer: string;
}

export type SchemaCheckReply = { id: number; matches: boolean } | { ready: true };

const checker = new Ajv({ strict: false, allErrors: false, validateFormats: false });

/**
 * Whether the answer matches the schema; true for an answer that is not JSON or a schema the checker cannot read
 * (nothing to hold the answer to).
 */
function matches(schema: Record<string, unknown>, answer: string): boolean {
  let value: unknown;
  try {
    value = JSON.parse(answer);
  } catch {
    return true;
  }
  let validate: ValidateFunction;
  try {
    validate = checker.compile(schema);
  } catch {
    return true;
  } finally {
    // Compiled schemas are cached by the schema object: each check brings its own.
    checker.removeSchema(schema);
  }
  return validate(value);
}

parentPort!.on('message', ({ id, schema, answer }: SchemaCheck) => {
  parentPort!.postMessage({ id, matches: matches(schema, answer) } satisfies SchemaCheckReply);
});
// Loaded and listening: the first check's budget starts now, not while the thread and ajv load.
parentPort!.postMessage({ ready: true } satisfies SchemaCheckReply);
