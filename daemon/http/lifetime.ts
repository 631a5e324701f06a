// When a call is over. A response's own 'close' is not enough: a pipelined request whose response is still queued
// behind another never gets one if the client resets the connection. So a call ends at whichever comes first, its
// response closing or its socket closing, and each callback runs exactly once. One socket listener serves every
// call on that socket, so a deep pipeline does not pile up listeners.
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';

const callbacksBySocket = new WeakMap<Socket, Set<() => void>>();

function onSocketClose(socket: Socket, callback: () => void): () => void {
  let callbacks = callbacksBySocket.get(socket);
  if (!callbacks) {
    const set = new Set<() => void>();
    callbacks = set;
    callbacksBySocket.set(socket, set);
    socket.once('close', () => {
      for (const fn of [...set]) fn();
      set.clear();
    });
  }
  callbacks.add(callback);
  return () => callbacks.delete(callback);
}

/** Runs `callback` once, when the call's response has closed or its connection is gone. */
export function onCallEnd(request: FastifyRequest, reply: FastifyReply, callback: (finished: boolean) => void): void {
  let done = false;
  let forget = () => {};
  const end = () => {
    if (done) return;
    done = true;
    forget();
    reply.raw.off('close', end);
    callback(reply.raw.writableFinished);
  };
  reply.raw.once('close', end);
  const socket = request.raw.socket as Socket | null;
  if (socket && !socket.destroyed) forget = onSocketClose(socket, end);
  else if (!socket || socket.destroyed) queueMicrotask(end);
}

/** A signal that fires when the client goes away before the response is complete. */
export function abortOnDisconnect(request: FastifyRequest, reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  onCallEnd(request, reply, (finished) => {
    if (!finished) controller.abort(new Error('client disconnected'));
  });
  return controller.signal;
}
