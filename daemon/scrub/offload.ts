// Large request bodies are scrubbed off the event loop, in one worker thread: scrubbing is linear, but a body of
// megabytes of digits, or of tens of thousands of small strings, would hold every other call while it is scrubbed.
// Smaller bodies are scrubbed where they are, which costs less than the trip to the thread. The worker is started on first
// use and ends after a minute idle (idle, it does not keep the process alive); a worker that fails takes only the
// calls it held with it (they fail closed).
import { Worker } from 'node:worker_threads';
import { ApiError } from '../errors/index.js';
import type { OffloadReply, OffloadRequest } from './offload-thread.js';
import type { BodyKind } from './requests.js';
import { ScrubSession } from './session.js';

/** Bodies of this many bytes or more are scrubbed in the worker. */
export const OFFLOAD_FROM = 64 * 1024;

const IDLE_MS = 60_000;
// Under the test runner the sources run as TypeScript (the worker inherits its loader); built, as JavaScript.
const THREAD = new URL(import.meta.url.endsWith('.ts') ? './offload-thread.ts' : './offload-thread.js', import.meta.url);

interface Pending {
  resolve: (result: { body: unknown; session: ScrubSession }) => void;
  reject: (err: Error) => void;
}

let worker: Worker | null = null;
let nextId = 1;
const pending = new Map<number, Pending>();
let idleTimer: NodeJS.Timeout | undefined;

function thread(): Worker {
  if (worker) return worker;
  const started = new Worker(THREAD);
  started.on('message', (reply: OffloadReply) => {
    const waiter = pending.get(reply.id);
    if (!waiter) return;
    pending.delete(reply.id);
    if ('state' in reply) waiter.resolve({ body: reply.body, session: ScrubSession.fromState(reply.state) });
    else if ('refused' in reply) waiter.reject(new ApiError(reply.refused.code, reply.refused.message, { param: reply.refused.param }));
    else waiter.reject(new Error(reply.failed));
    if (!pending.size) {
      started.unref();
      idleTimer = setTimeout(() => {
        if (worker !== started || pending.size) return;
        worker = null;
        void started.terminate();
      }, IDLE_MS).unref();
    }
  });
  // A permanent listener: an unheard 'error' would take the daemon down.
  started.on('error', () => {});
  started.once('exit', (code) => {
    if (worker === started) worker = null;
    for (const [id, waiter] of pending) {
      pending.delete(id);
      waiter.reject(new Error(`the scrubbing worker stopped (exit code ${code})`));
    }
  });
  worker = started;
  return started;
}

/** Scrubs `body` (of `kind`) in the worker; resolves with the scrubbed body and the session that scrubbed it. */
export function scrubOffLoop(kind: BodyKind, body: unknown): Promise<{ body: unknown; session: ScrubSession }> {
  clearTimeout(idleTimer);
  const id = nextId++;
  const started = thread();
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    try {
      started.postMessage({ id, kind, body } satisfies OffloadRequest);
      // Held while it scrubs, let go once idle: an idle worker never keeps a process from ending.
      started.ref();
    } catch (err) {
      // A body too deeply nested to copy to the thread (thousands of levels): it is scrubbed where it is.
      pending.delete(id);
      if (!pending.size) started.unref();
      reject(new NotCopyable(err instanceof Error ? err.message : String(err)));
    }
  });
}

/** The body could not be copied to the worker; the caller scrubs it where it is (the walk refuses deep nesting early). */
export class NotCopyable extends Error {
  constructor(reason: string) {
    super(`the body cannot be copied to the scrubbing worker: ${reason}`);
    this.name = 'NotCopyable';
  }
}

/** Ends the worker now (the daemon is stopping). */
export async function stopScrubWorker(): Promise<void> {
  clearTimeout(idleTimer);
  await worker?.terminate();
}
