// A response sent before its request body was read (401, 413, 415, 429, 503, 404 on a POST) closes the connection,
// so that the connection never carries a second call and a client cannot make the daemon take in more than a
// bounded amount of a body it never accepted. But it closes it after the body, not at once: closing a socket with
// bytes still arriving makes the kernel answer them with a reset, and a reset throws away what the client has not
// read yet, our response included. The client then sees "connection reset" or EPIPE on its write instead of the
// error that says what to do (RFC 9112 §9.6). So the daemon sends its response and its FIN, reads what is left of
// the body and throws it away (Node's parser discards a body nobody consumes), and closes once the body is in. A body
// declared larger than a bound is not waited for: that connection closes at once. One without a declared length
// (chunked) is cut once that many bytes have come in, and any body still arriving after a few seconds is cut then.
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** The largest refused body read to its end before the connection closes; a larger one is cut off. */
export const REFUSED_BODY_MAX_BYTES = 64 * 1024 * 1024;
/** How long the rest of a refused body may take to arrive. */
export const REFUSED_BODY_MAX_MS = 5_000;
/** How often a refused body's bounds are checked while it arrives. */
const CHECK_EVERY_MS = 50;

/** For an onSend hook: a response leaving before its request's body was read closes its connection, after the body. */
export function settleRefusedBody(request: FastifyRequest, reply: FastifyReply): void {
  const raw = request.raw;
  if (raw.complete) return;
  reply.header('connection', 'close');
  if (Number(raw.headers['content-length']) > REFUSED_BODY_MAX_BYTES) return;
  const socket = raw.socket as Socket | null;
  if (!socket) return;
  // Node's server closes a connection whose last response has gone by calling destroySoon() on its socket: end our
  // side, then destroy. Here the destroy waits for the rest of the body, within the bounds.
  socket.destroySoon = function closeAfterBody(this: Socket) {
    this.end();
    if (raw.complete) {
      delete (this as Partial<Socket>).destroySoon;
      this.destroySoon();
      return;
    }
    // Node's parser reads the socket's handle directly, so no 'data' event counts the bytes: its handle does.
    const started = Date.now();
    const readBefore = this.bytesRead;
    const timer = setInterval(() => {
      const late = Date.now() - started >= REFUSED_BODY_MAX_MS;
      if (late || this.bytesRead - readBefore > REFUSED_BODY_MAX_BYTES) this.destroy();
    }, CHECK_EVERY_MS);
    timer.unref();
    const close = () => {
      clearInterval(timer);
      if (this.writableFinished) this.destroy();
      else this.once('finish', () => this.destroy());
    };
    raw.once('end', close);
    // A client that sends no more (it was waiting for 100 Continue, or gave up) ends its side: nothing to wait for.
    this.once('end', close);
    this.once('close', () => clearInterval(timer));
  };
}
