// When a call is over. A response's own 'close' is not enough: a pipelined request whose response is still queued
// behind another never gets one if the client resets the connection. So a call ends at whichever comes first, its
// response closing or its socket closing, and each callback runs exactly once. One socket listener serves every
// call on that socket, so a deep pipeline does not pile up listeners.
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';

const callbacksBySocket = new WeakMap<Socket, Set<() => void>>();

function onSocketClose(socket: Socket, callback: () => void): () => void {
  const callbacks = callbacksBySocket.get(socket) ?? watchClose(socket);
  callbacks.add(callback);
  return forgetter(callbacks, callback);
}

// The socket's listener and the call's forgetter are made in functions of their own: closures made in one function
// share its variables, so a listener made beside `callback` would keep the socket's first call (its request,
// response and everything they reach) alive for as long as the connection stays open.
function watchClose(socket: Socket): Set<() => void> {
  const callbacks = new Set<() => void>();
  callbacksBySocket.set(socket, callbacks);
  socket.once('close', () => {
    for (const fn of [...callbacks]) fn();
    callbacks.clear();
  });
  return callbacks;
}

function forgetter(callbacks: Set<() => void>, callback: () => void): () => void {
  return () => callbacks.delete(callback);
}

/** A call's end, shared by every callback registered for it: one set of listeners per call, however many ask. */
interface CallEnd {
  callbacks: Array<(finished: boolean) => void>;
  /** Set once the call has ended: whether its response was completely written. */
  finished: boolean | null;
}

// On the response itself, not in a WeakMap keyed by it: V8's young collections treat a WeakMap's values as live (only
// full collections clear them), so a call's state MUST NOT be kept in one, or it outlives its call in the old
// generation.
const callEnd = Symbol('sovereign.callEnd');
type WithCallEnd = FastifyReply['raw'] & { [callEnd]?: CallEnd };

/**
 * Runs `callback` once, when the call's response has closed or its connection is gone (at once, on the next
 * microtask, if that has already happened).
 */
export function onCallEnd(request: FastifyRequest, reply: FastifyReply, callback: (finished: boolean) => void): void {
  const response: WithCallEnd = reply.raw;
  const known = response[callEnd];
  if (known) {
    if (known.finished === null) known.callbacks.push(callback);
    else {
      const finished = known.finished;
      queueMicrotask(() => callback(finished));
    }
    return;
  }
  const state: CallEnd = { callbacks: [callback], finished: null };
  response[callEnd] = state;
  let forget = () => {};
  const end = () => {
    if (state.finished !== null) return;
    state.finished = response.writableFinished;
    forget();
    response.off('close', end);
    for (const fn of state.callbacks.splice(0)) fn(state.finished);
  };
  response.once('close', end);
  const socket = request.raw.socket as Socket | null;
  if (socket && !socket.destroyed) forget = onSocketClose(socket, end);
  else queueMicrotask(end);
}

/**
 * An AbortSignal that aborts when the client goes away before the response is complete. `controller`: one the caller
 * also aborts for reasons of its own, so that a call makes one signal.
 */
export function abortOnDisconnect(request: FastifyRequest, reply: FastifyReply, controller = new AbortController()): AbortSignal {
  onCallEnd(request, reply, (finished) => {
    if (!finished) controller.abort(new Error('client disconnected'));
  });
  return controller.signal;
}
