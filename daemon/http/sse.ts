// A streamed answer as server-sent events, written straight to the response once its head is out: not through a stream
// that fastify pipes to it, whose listeners and ticks would be per-event work this writer does without. One writer per
// call: it batches the answer's pieces into events and events into socket writes, hashes what it sent for the call's
// audit entry, holds back what the answer's scrubber cannot pass on yet, and ends the stream with the audit entry's
// leaf and the response's end in one corked write. It knows SSE framing and the audit entry; every event's content is
// the caller's (chat completions, completions, responses).
import { createHash } from 'node:crypto';
import type { OutgoingHttpHeaders } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { ApiError } from '../errors/index.js';
import { AUDIT_FAILED_AFTER_STREAM } from './stages/audit.js';

/** A streamed answer's scrubber: each piece in, what can be passed on now out; the rest at the end. */
export interface TextScrubber {
  push(piece: string): string;
  end(): string;
}

export interface SseOptions {
  /**
   * Appends the call's audit entry with the digest of what was sent and the call's status; resolves with the entry's
   * leaf. Null when the call is not audited.
   */
  record: (sentSha256: string, status: number) => Promise<number> | null;
  /** The answer's text as one event (its JSON is the caller's). Only called with text that is not empty. */
  textEvent: (text: string) => string;
  /** An error as one event: sent in place of the leaf's comment when the audit entry could not be appended. */
  errorEvent: (error: ApiError) => string;
  /** The answer's scrubber; null when answers are not scrubbed. */
  scrubber: TextScrubber | null;
  /** Told once, when scrubbing the answer fails: generation MUST stop. No more of the answer's text is sent. */
  onScrubFailure: (err: Error) => void;
  /** Sent last, after the audit leaf's comment (`data: [DONE]\n\n` for chat and completions); null for none. */
  done: string | null;
}

/** What was sent is hashed once this many bytes of it are waiting (and at the end). */
const HASH_EVERY = 16 * 1024;

export class SseStream {
  /** The response, once its head is out (open()). Nothing is written to it once the client has gone. */
  private res: FastifyReply['raw'] | null = null;

  // What was sent, for the audit entry's digest: the bytes each write went out as (a string handed to the hash would
  // be encoded to UTF-8 a second time), hashed HASH_EVERY bytes at a time and at the end rather than once per write.
  // Once the digest is taken, what follows (the leaf's comment, the error event of a failed entry, `done`) is not in it.
  private readonly sent = createHash('sha256');
  private unhashed: Buffer[] = [];
  private unhashedBytes = 0;
  private digested = false;

  // Events made in the same turn leave in one socket write (one TLS record, one syscall); nothing waits beyond the
  // turn. The first events (made as the stream opens) wait for the end of the event loop's turn, not just the current
  // task: an upstream's first pieces usually arrive with its headers, and then leave with them.
  private batch = '';
  private firstFlush = true;

  /** Set once the answer's text is over: events made from then on wait in `held` to leave with the stream's end. */
  private holding = false;
  private held = '';
  /** The events made once the text was over, encoded once: hashed when the stream finishes, sent in its last write. */
  private last: Buffer | null = null;

  // The answer's pieces made in one turn (an upstream's events often come several to a read) are scrubbed and sent as
  // one event: one pass of the scrubber and one event, not one each. They go at the end of the current task.
  private pending = '';
  private textEnded = false;
  private failure: Error | null = null;

  constructor(
    private readonly reply: FastifyReply,
    private readonly options: SseOptions,
  ) {}

  /**
   * Commits the response to 200 with its head (it leaves with the first write): the reply is taken over from fastify
   * with every header the stages set on it. Its onSend hooks do not run for it (both of the daemon's leave streams
   * alone: the audit stage records a stream at its end, through `record`, and a stream only starts once the request's
   * body has been read); its onResponse hooks still run when it finishes. Events MUST NOT be made before it.
   */
  open(): void {
    const reply = this.reply;
    reply.type('text/event-stream; charset=utf-8').header('cache-control', 'no-cache').hijack();
    this.res = reply.raw;
    this.res.writeHead(200, reply.getHeaders() as OutgoingHttpHeaders);
  }

  /**
   * One event of the answer (framed by the caller, with its blank line): in the digest. Once the digest is taken the
   * answer is over, and an event still made then is not sent: the client MUST get nothing the audit entry lacks.
   */
  event(event: string): void {
    if (!this.digested) this.send(event);
  }

  /** A piece of the answer's text: scrubbed, and sent with the others of its turn as one event (textEvent). */
  text(piece: string): void {
    if (this.failure || this.textEnded) return;
    if (!this.pending) queueMicrotask(this.passPending);
    this.pending += piece;
  }

  /**
   * The answer's text is over: the pieces still pending leave with this turn's events, what the scrubber held back is
   * scrubbed and sent as the text's last event, and every event made from now on waits to leave with the stream's end,
   * after the audit entry. The held-back text waits with those last events; after a `failed` generation it leaves now,
   * with the text before it (the failure's error event follows it, after the audit entry). Called again, it does
   * nothing more.
   */
  endText({ failed = false }: { failed?: boolean } = {}): void {
    if (this.textEnded) return;
    this.passPending();
    this.textEnded = true;
    if (!failed) this.holding = true;
    const scrubber = this.options.scrubber;
    if (scrubber && !this.failure) this.scrubbed(() => scrubber.end());
    this.holding = true;
  }

  /** The error that stopped scrubbing the answer, if it failed. */
  get scrubFailure(): Error | null {
    return this.failure;
  }

  /**
   * Ends the stream: the text ends if it has not (endText), the digest of everything sent is taken and the audit entry
   * appended with it and `status` (a stream that ended in an error event is recorded with that error's status, though
   * its HTTP status line said 200). The entry is on disk before the stream's end: its leaf is named in an SSE comment,
   * which clients ignore, then `done` follows and the response ends.
   */
  async finish(status = 200): Promise<void> {
    this.endText();
    // This turn's events leave now, as their scheduled flush would have sent them (it will find nothing left).
    this.flush();
    if (this.held) {
      this.last = Buffer.from(this.held);
      this.held = '';
      this.unhashed.push(this.last);
      this.unhashedBytes += this.last.length;
    }
    this.hashSent();
    this.digested = true;
    try {
      const leaf = await this.options.record(this.sent.digest('hex'), status);
      if (leaf !== null) this.auditLeaf(leaf);
    } catch (err) {
      this.reply.log.error({ err: (err as Error).message }, 'the audit log could not record a call');
      this.send(this.options.errorEvent(AUDIT_FAILED_AFTER_STREAM));
    }
    if (this.options.done !== null) this.send(this.options.done);
    this.end();
  }

  /** The comment naming the call's audit entry. */
  private auditLeaf(leaf: number): void {
    this.send(`: x-audit-leaf ${leaf}\n\n`);
  }

  private send(text: string): void {
    if (this.holding) this.held += text;
    else {
      if (!this.batch) this.scheduleFlush();
      this.batch += text;
    }
  }

  private scheduleFlush(): void {
    if (!this.firstFlush) queueMicrotask(this.flush);
    else {
      this.firstFlush = false;
      setImmediate(this.flush);
    }
  }

  private readonly flush = (): void => {
    if (!this.batch) return;
    const bytes = Buffer.from(this.batch);
    this.batch = '';
    if (!this.digested) {
      this.unhashed.push(bytes);
      this.unhashedBytes += bytes.length;
      if (this.unhashedBytes >= HASH_EVERY) this.hashSent();
    }
    this.emit(bytes);
  };

  private emit(bytes: Buffer): void {
    const res = this.res;
    if (res && !res.destroyed && !res.writableEnded) res.write(bytes);
  }

  private hashSent(): void {
    const unhashed = this.unhashed;
    if (unhashed.length) this.sent.update(unhashed.length === 1 ? unhashed[0]! : Buffer.concat(unhashed, this.unhashedBytes));
    this.unhashed = [];
    this.unhashedBytes = 0;
  }

  private readonly passPending = (): void => {
    const text = this.pending;
    this.pending = '';
    if (!text || this.failure) return;
    const scrubber = this.options.scrubber;
    if (!scrubber) this.textOut(text);
    else this.scrubbed(() => scrubber.push(text));
  };

  private scrubbed(step: () => string): void {
    try {
      this.textOut(step());
    } catch (err) {
      this.failure = err instanceof Error ? err : new Error(String(err));
      this.options.onScrubFailure(this.failure);
    }
  }

  private textOut(text: string): void {
    if (text) this.event(this.options.textEvent(text));
  }

  /**
   * The last events and the chunked encoding's terminator in one socket write: the response is corked until its end()
   * (which uncorks it fully). Only when its head is out, nothing waits for a drain and the events fit under the socket's
   * high-water mark (at most 3 bytes per UTF-16 unit, plus the chunk's framing): a write past it would wait for a drain
   * that a corked socket never has.
   */
  private end(): void {
    this.batch += this.held;
    this.held = '';
    const res = this.res;
    if (!res || res.destroyed || res.writableEnded) return;
    const socket = res.socket;
    const bytes = (this.last?.length ?? 0) + 3 * this.batch.length + 64;
    const fits = socket !== null && socket.writableLength + bytes < socket.writableHighWaterMark;
    if (fits && res.headersSent && !res.writableNeedDrain) res.cork();
    if (this.last) this.emit(this.last);
    this.flush();
    res.end();
  }
}
