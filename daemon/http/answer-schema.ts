// Checking a structured answer against the client's JSON schema, in a worker thread within a time budget: the schema's
// patterns are the client's regular expressions, and one that backtracks exponentially (`^(a+)+$` on forty letters)
// held the event loop, and every other call, for hours. One thread checks one answer at a time (strict structured
// answers, and answers in which scrubbing put a placeholder where JSON had a number); one that is over its budget is
// ended, and the next check starts a new one. The budget counts from when the thread is loaded, not from its start (which, on a
// loaded machine, can take longer than the budget). An idle thread ends after a minute, and never holds the process.
import { Worker } from 'node:worker_threads';
import type { SchemaCheck, SchemaCheckReply, SchemaVerdict } from './answer-schema-thread.js';

export type { SchemaVerdict } from './answer-schema-thread.js';

/** How long one check may take: a real schema and answer take milliseconds. */
export const SCHEMA_CHECK_BUDGET_MS = 1000;

const IDLE_MS = 60_000;
// Under the test runner the sources run as TypeScript (the worker inherits its loader); built, as JavaScript.
const THREAD = new URL(import.meta.url.endsWith('.ts') ? './answer-schema-thread.ts' : './answer-schema-thread.js', import.meta.url);

/** The check did not end within its budget. */
export class SchemaCheckTimeout extends Error {
  constructor() {
    super(`the check took more than ${SCHEMA_CHECK_BUDGET_MS} ms`);
    this.name = 'SchemaCheckTimeout';
  }
}

interface Thread {
  worker: Worker;
  /** Resolves once the thread has loaded (its start does not count against a check's budget); rejects if it ends first. */
  ready: Promise<void>;
}

let current: Thread | null = null;
let nextId = 1;
let idleTimer: NodeJS.Timeout | undefined;
/** The checks, one after the other. */
let queue: Promise<unknown> = Promise.resolve();

function thread(): Thread {
  if (current) return current;
  const worker = new Worker(THREAD);
  // A permanent listener: an unheard 'error' would take the daemon down.
  worker.on('error', () => {});
  const ready = new Promise<void>((resolve, reject) => {
    const onReady = (reply: SchemaCheckReply) => {
      if (!('ready' in reply)) return;
      worker.off('message', onReady);
      resolve();
    };
    worker.on('message', onReady);
    worker.once('exit', (code) => reject(new Error(`the schema-checking thread stopped as it started (exit code ${code})`)));
  });
  ready.catch(() => {});
  const started = { worker, ready };
  worker.once('exit', () => {
    if (current === started) current = null;
  });
  current = started;
  return started;
}

async function check(schema: Record<string, unknown>, answer: string, strict: boolean): Promise<SchemaVerdict> {
  clearTimeout(idleTimer);
  const { worker: running, ready } = thread();
  // Held while it checks, let go once idle: an idle thread never keeps a process from ending.
  running.ref();
  try {
    await ready;
  } catch (err) {
    running.unref();
    throw err;
  }
  const id = nextId++;
  return new Promise<SchemaVerdict>((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      running.off('message', onMessage);
      running.off('exit', onExit);
      running.unref();
      idleTimer = setTimeout(() => void stopSchemaChecks(), IDLE_MS).unref();
    };
    const onMessage = (reply: SchemaCheckReply) => {
      if (!('id' in reply) || reply.id !== id) return;
      done();
      resolve(reply.verdict);
    };
    const onExit = (code: number) => {
      done();
      reject(new Error(`the schema-checking thread stopped (exit code ${code})`));
    };
    const timer = setTimeout(() => {
      done();
      if (current?.worker === running) current = null;
      void running.terminate();
      reject(new SchemaCheckTimeout());
    }, SCHEMA_CHECK_BUDGET_MS);
    running.on('message', onMessage);
    running.once('exit', onExit);
    running.postMessage({ id, schema, answer, strict } satisfies SchemaCheck);
  });
}

/**
 * Whether `answer` (JSON text) matches `schema`. Not `strict`: it does also when the answer is not JSON or the schema
 * cannot be read. Rejects with SchemaCheckTimeout when the check is over its budget.
 */
export function checkAnswer(schema: Record<string, unknown>, answer: string, strict = false): Promise<SchemaVerdict> {
  const result = queue.then(() => check(schema, answer, strict));
  queue = result.catch(() => {});
  return result;
}

/** Ends the thread now (the daemon is stopping, or it has been idle). */
export async function stopSchemaChecks(): Promise<void> {
  clearTimeout(idleTimer);
  const running = current;
  current = null;
  await running?.worker.terminate();
}
