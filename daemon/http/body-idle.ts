// A request body that stops arriving is cut off after timeouts.bodyIdleMs without a byte: the call is answered 408
// (written straight to the socket, as Node answers its own request timeout) and its connection closed, which gives
// its in-flight place back. Node's request timeout (timeouts.requestMs) bounds the whole request, but it is checked
// only every 30 s, and clients trickling their bodies held their calls' places for 81 s.
//
// Only the client's silence counts: while the daemon itself is not reading (a route still busy with what came
// before, a stream paused by back-pressure) or the event loop was held up, the clock starts again.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';

interface Watched {
  request: FastifyRequest;
  response: ServerResponse;
  socket: Socket;
  /** The socket's bytesRead when the body last made progress (Node's parser reads the handle: no 'data' to count). */
  bytesRead: number;
  since: number;
}

export class BodyIdleWatch {
  private readonly watched = new Map<IncomingMessage, Watched>();
  private readonly everyMs: number;
  private timer: NodeJS.Timeout | null = null;
  private lastTick = 0;
  /** One listener for every body, so watching a call makes no closure. */
  private readonly forget: (this: IncomingMessage) => void;

  constructor(
    private readonly idleMs: number,
    private readonly onIdle: (request: FastifyRequest) => void,
  ) {
    this.everyMs = Math.max(25, Math.min(500, Math.floor(idleMs / 4)));
    const watched = this.watched;
    this.forget = function (this: IncomingMessage) {
      watched.delete(this);
    };
  }

  /** Watches the request's body until it has all arrived; a request without one is not watched. */
  watch(request: FastifyRequest, reply: FastifyReply): void {
    const raw = request.raw;
    const socket = raw.socket as Socket | null;
    if (!socket || raw.complete) return;
    const length = raw.headers['content-length'];
    if (raw.headers['transfer-encoding'] === undefined && (length === undefined || length === '0')) return;
    this.watched.set(raw, { request, response: reply.raw, socket, bytesRead: socket.bytesRead, since: Date.now() });
    raw.on('end', this.forget);
    if (!this.timer) {
      this.lastTick = Date.now();
      this.timer = setInterval(() => this.tick(), this.everyMs);
      this.timer.unref();
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.watched.clear();
  }

  private tick(): void {
    const now = Date.now();
    // A late tick means the event loop was busy: what the clients sent meanwhile has not been read yet.
    const late = now - this.lastTick > 2 * this.everyMs;
    this.lastTick = now;
    for (const [raw, entry] of this.watched) {
      const { socket } = entry;
      // Complete, gone, or answered already (a refused body is then bounded by refused-body.ts).
      if (raw.complete || socket.destroyed || entry.response.headersSent) {
        this.watched.delete(raw);
        continue;
      }
      const read = socket.bytesRead;
      if (late || read !== entry.bytesRead || raw.readableLength > 0 || raw.isPaused()) {
        entry.bytesRead = read;
        entry.since = now;
        continue;
      }
      if (now - entry.since >= this.idleMs) {
        this.watched.delete(raw);
        this.onIdle(entry.request);
      }
    }
    if (this.watched.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }
}
