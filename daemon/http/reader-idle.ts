// A connection whose client stops reading its answer is closed after timeouts.readerIdleMs without a byte of it
// leaving: the call ends (an engine still generating for it is stopped), and its in-flight place and the memory the
// unsent answer holds come back. Node bounds how long a request may take to arrive, not how long its answer may
// wait to leave: without this, a client that asked for a large answer and never read it would hold its place, and
// the answer, for as long as it kept the connection open.
//
// Only the client's silence counts: the clock runs only while part of an answer waits in the socket and none of it
// has left since the last look (a call still working on its answer has nothing waiting), and starts again when the
// event loop was held up.
import type { Socket } from 'node:net';

interface Watched {
  /** The socket's progress (progressOf) when it was last seen to make some. */
  sent: number;
  queued: number;
  since: number;
}

/**
 * How far the socket's writes have got: the bytes of writes that have completed (`bytesWritten` counts what is queued
 * too, `writableLength` what has not completed, so a write only queued adds to both), and the bytes the one write in
 * progress still has to hand to the kernel (libuv's write queue: a large answer is one write, which the kernel takes in
 * parts as the client reads). Either changes when the client reads; neither while it does not.
 */
function progressOf(socket: Socket): { sent: number; queued: number } {
  const handle = (socket as Socket & { _handle?: { writeQueueSize?: number } })._handle;
  return { sent: (socket.bytesWritten ?? 0) - socket.writableLength, queued: handle?.writeQueueSize ?? -1 };
}

export class ReaderIdleWatch {
  private readonly watched = new Map<Socket, Watched>();
  private readonly everyMs: number;
  private timer: NodeJS.Timeout | null = null;
  private lastTick = 0;
  /** One listener for every socket, so watching a connection makes no closure. */
  private readonly forget: (this: Socket) => void;

  constructor(
    private readonly idleMs: number,
    private readonly onIdle: (socket: Socket) => void,
  ) {
    this.everyMs = Math.max(25, Math.min(1000, Math.floor(idleMs / 4)));
    const watched = this.watched;
    this.forget = function (this: Socket) {
      watched.delete(this);
    };
  }

  /** Watches the connection until it closes (its first call starts the watch; later calls find it watched). */
  watch(socket: Socket | null): void {
    if (!socket || socket.destroyed || this.watched.has(socket)) return;
    this.watched.set(socket, { ...progressOf(socket), since: Date.now() });
    socket.once('close', this.forget);
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
    // A late tick means the event loop was busy: the client may have read meanwhile without the socket being told.
    const late = now - this.lastTick > 2 * this.everyMs;
    this.lastTick = now;
    for (const [socket, entry] of this.watched) {
      if (socket.destroyed) {
        this.watched.delete(socket);
        continue;
      }
      const { sent, queued } = progressOf(socket);
      if (late || socket.writableLength === 0 || sent !== entry.sent || queued !== entry.queued) {
        entry.sent = sent;
        entry.queued = queued;
        entry.since = now;
        continue;
      }
      if (now - entry.since >= this.idleMs) {
        this.watched.delete(socket);
        this.onIdle(socket);
      }
    }
    if (this.watched.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }
}
