// The scrubbing worker thread (offload.ts): scrubs one request body at a time, as the event loop would, and sends back
// the body and its session.
import { parentPort } from 'node:worker_threads';
import { ApiError } from '../errors/index.js';
import { SCRUB_BODY, type BodyKind } from './requests.js';
import { ScrubSession, type SessionState } from './session.js';

export interface OffloadRequest {
  id: number;
  kind: BodyKind;
  body: unknown;
}

export type OffloadReply =
  | { id: number; body: unknown; state: SessionState }
  | { id: number; refused: { code: ApiError['code']; message: string; param: string | null } }
  | { id: number; failed: string };

parentPort!.on('message', ({ id, kind, body }: OffloadRequest) => {
  const session = new ScrubSession();
  let reply: OffloadReply;
  try {
    SCRUB_BODY[kind](body, session);
    reply = { id, body, state: session.state() };
  } catch (err) {
    reply =
      err instanceof ApiError
        ? { id, refused: { code: err.code, message: err.message, param: err.param } }
        : { id, failed: err instanceof Error ? err.message : String(err) };
  }
  parentPort!.postMessage(reply);
});
