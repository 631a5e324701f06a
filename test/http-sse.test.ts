// The streamed answer's writer (daemon/http/sse.ts) on its own, on a real response served over loopback: events of one
// turn leave in one write, text pieces of one turn make one event, the digest handed to the audit entry is the SHA-256
// of the bytes sent before it, what the scrubber holds back leaves at the end (after the audit entry, in the last,
// corked write), finish(status) records that status and ends the stream, and a client that goes away is written to no
// more. (The chat route's streams through the whole daemon: test/streaming.test.ts, test/audit-streams.test.ts.)
import { createHash } from 'node:crypto';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import t, { type Test } from 'tap';
import type { ApiError } from '../daemon/errors/index.js';
import { SseStream, type SseOptions, type TextScrubber } from '../daemon/http/sse.js';

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');
/** A later turn of the event loop: every write scheduled by now has been made. */
const nextTurn = () => new Promise((resolve) => setTimeout(resolve, 1));
const dataEvent = (value: unknown) => `data: ${JSON.stringify(value)}\n\n`;

interface Write {
  text: string;
  /** Whether the response was corked when the bytes were handed to it. */
  corked: boolean;
}

interface Harness {
  sse: SseStream;
  res: ServerResponse;
  /** Every write the stream made to the response, in order. */
  writes: Write[];
  /** The response as the client sees it, once its head has arrived (with the first write: writeHead only sets it). */
  response: Promise<IncomingMessage>;
  /** Everything the client received, once the response has ended. */
  body: Promise<string>;
  /** The audit entries the stream asked for. */
  recorded: Array<{ sha: string; status: number }>;
  /** What the daemon's logger was told at error level. */
  errors: string[];
}

/** A stream on a real response over loopback, opened, with the client's request under way. */
async function openStream(t: Test, options: Partial<SseOptions> = {}): Promise<Harness> {
  const errors: string[] = [];
  const logger = {
    level: 'info',
    info() {},
    warn() {},
    debug() {},
    fatal() {},
    trace() {},
    error(_fields: unknown, message: string) {
      errors.push(message);
    },
    child() {
      return logger;
    },
  };
  const app = Fastify({ loggerInstance: logger as unknown as FastifyBaseLogger });
  const recorded: Harness['recorded'] = [];
  const writes: Write[] = [];
  let handed: (server: { sse: SseStream; res: ServerResponse }) => void = () => {};
  const server = new Promise<{ sse: SseStream; res: ServerResponse }>((resolve) => (handed = resolve));
  app.get('/stream', async (_request, reply) => {
    const res = reply.raw;
    const write = res.write.bind(res) as (chunk: Buffer) => boolean;
    res.write = ((chunk: Buffer) => {
      writes.push({ text: chunk.toString('utf8'), corked: res.writableCorked > 0 });
      return write(chunk);
    }) as typeof res.write;
    reply.header('x-stage', 'set before the stream');
    const sse = new SseStream(reply, {
      record: (sha, status) => {
        recorded.push({ sha, status });
        return Promise.resolve(7);
      },
      textEvent: (text) => dataEvent({ text }),
      errorEvent: (error: ApiError) => dataEvent(error.toBody()),
      scrubber: null,
      onScrubFailure: () => {},
      done: 'data: [DONE]\n\n',
      ...options,
    });
    sse.open();
    handed({ sse, res });
    return reply;
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const { port } = app.server.address() as { port: number };
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/stream', agent: false }, resolve);
    req.on('error', reject);
  });
  const body = response.then(
    (res) =>
      new Promise<string>((resolve, reject) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
        res.on('error', reject);
      }),
  );
  // A body that fails after its test has ended fails nothing.
  body.catch(() => {});
  const { sse, res } = await server;
  return { sse, res, writes, response, body, recorded, errors };
}

/** A scrubber that holds back what follows the last space (it might be the start of a value). */
function holdingAfterSpace(): TextScrubber & { ended: number } {
  let window = '';
  return {
    ended: 0,
    push(piece) {
      window += piece;
      const settled = window.lastIndexOf(' ') + 1;
      const out = window.slice(0, settled);
      window = window.slice(settled);
      return out;
    },
    end() {
      this.ended++;
      const out = window;
      window = '';
      return out;
    },
  };
}

t.test('the head: 200, an event stream, with the headers set on the reply before it opened', async (t) => {
  const { sse, response, body } = await openStream(t);
  await sse.finish();
  const { statusCode, headers } = await response;
  t.equal(statusCode, 200);
  t.equal(headers['content-type'], 'text/event-stream; charset=utf-8');
  t.equal(headers['cache-control'], 'no-cache');
  t.equal(headers['x-stage'], 'set before the stream');
  t.equal(await body, ': x-audit-leaf 7\n\ndata: [DONE]\n\n');
});

t.test('events made in one task leave in one write; the first write waits for the end of the loop turn', async (t) => {
  const { sse, writes, body } = await openStream(t);
  sse.event('data: a\n\n');
  // Made by a later task of the same turn: it joins the first write.
  await Promise.resolve();
  sse.event('data: b\n\n');
  await nextTurn();
  sse.event('data: c\n\n');
  sse.event('data: d\n\n');
  // Later writes wait for the end of the task only: an event made in a task after it leaves on its own.
  await Promise.resolve();
  sse.event('data: e\n\n');
  await nextTurn();
  t.same(
    writes.map((w) => w.text),
    ['data: a\n\ndata: b\n\n', 'data: c\n\ndata: d\n\n', 'data: e\n\n'],
  );
  await sse.finish();
  t.equal(await body, 'data: a\n\ndata: b\n\ndata: c\n\ndata: d\n\ndata: e\n\n: x-audit-leaf 7\n\ndata: [DONE]\n\n');
});

t.test("the text's pieces of one turn make one event", async (t) => {
  const made: string[] = [];
  const { sse, writes, body } = await openStream(t, {
    textEvent: (text) => {
      made.push(text);
      return dataEvent({ text });
    },
  });
  sse.text('Hello');
  sse.text(', ');
  sse.text('world');
  await nextTurn();
  sse.text('!');
  sse.text('');
  await nextTurn();
  t.same(made, ['Hello, world', '!'], 'one event per turn, none for nothing');
  t.same(
    writes.map((w) => w.text),
    [dataEvent({ text: 'Hello, world' }), dataEvent({ text: '!' })],
  );
  await sse.finish();
  t.match(await body, /^data: \{"text":"Hello, world"\}\n\ndata: \{"text":"!"\}\n\n: x-audit-leaf 7\n\n/);
});

t.test('the digest is the SHA-256 of the bytes sent before the entry; what follows it is not in it', async (t) => {
  const { sse, body, recorded } = await openStream(t);
  // Several writes past the hashing threshold, with characters of two to four bytes in UTF-8.
  for (let turn = 0; turn < 12; turn++) {
    for (let i = 0; i < 5; i++) sse.event(dataEvent({ turn, i, text: `é€😀 ${'x'.repeat(900)}` }));
    await nextTurn();
  }
  sse.endText();
  sse.event(dataEvent({ last: 'ﷺ' }));
  await sse.finish();
  const received = await body;
  const trailer = ': x-audit-leaf 7\n\ndata: [DONE]\n\n';
  t.ok(received.endsWith(trailer), 'the leaf comment and [DONE] come last');
  const answer = received.slice(0, -trailer.length);
  t.ok(Buffer.byteLength(answer) > 3 * 16 * 1024, 'the answer went past the hashing threshold several times');
  t.same(recorded, [{ sha: sha256(answer), status: 200 }]);
  t.not(recorded[0].sha, sha256(received), 'the trailer is not in the digest');
});

t.test("what the scrubber holds back is released at the end, after the audit entry, in the stream's last write", async (t) => {
  const scrubber = holdingAfterSpace();
  let appended: (leaf: number) => void = () => {};
  const recorded: Array<{ sha: string; status: number }> = [];
  const { sse, writes, body } = await openStream(t, {
    scrubber,
    record: (sha, status) => {
      recorded.push({ sha, status });
      return new Promise<number>((resolve) => (appended = resolve));
    },
  });
  sse.text('call me at 0501');
  await nextTurn();
  sse.text('23456');
  await nextTurn();
  t.same(
    writes.map((w) => w.text),
    [dataEvent({ text: 'call me at ' })],
    'the tail that might be a value waits',
  );
  const finished = sse.finish();
  await nextTurn();
  t.equal(scrubber.ended, 1, 'the scrubber was told the text is over');
  t.equal(writes.length, 1, 'nothing more leaves before the audit entry is appended');
  t.equal(recorded.length, 1);
  appended(12);
  await finished;
  const tail = dataEvent({ text: '050123456' });
  t.same(writes.slice(1), [
    { text: tail, corked: true },
    { text: ': x-audit-leaf 12\n\ndata: [DONE]\n\n', corked: true },
  ]);
  const received = await body;
  t.equal(received, `${dataEvent({ text: 'call me at ' })}${tail}: x-audit-leaf 12\n\ndata: [DONE]\n\n`);
  t.equal(recorded[0].sha, sha256(`${dataEvent({ text: 'call me at ' })}${tail}`), 'the tail is in the digest');
});

t.test('events made after the text is over wait for the audit entry, and leave after the held-back tail', async (t) => {
  const { sse, writes, body } = await openStream(t, { scrubber: holdingAfterSpace() });
  sse.text('one two');
  await nextTurn();
  sse.endText();
  sse.event('data: closing\n\n');
  await nextTurn();
  t.same(
    writes.map((w) => w.text),
    [dataEvent({ text: 'one ' })],
  );
  await sse.finish();
  t.equal(await body, `${dataEvent({ text: 'one ' })}${dataEvent({ text: 'two' })}data: closing\n\n: x-audit-leaf 7\n\ndata: [DONE]\n\n`);
});

t.test('after a failure, what the scrubber held back leaves before the audit entry, and the error event after it', async (t) => {
  let appended: (leaf: number) => void = () => {};
  const { sse, writes, body } = await openStream(t, {
    scrubber: holdingAfterSpace(),
    record: () => new Promise<number>((resolve) => (appended = resolve)),
  });
  sse.text('one two');
  await nextTurn();
  sse.text(' thr');
  sse.endText({ failed: true });
  sse.event(dataEvent({ error: { message: 'the engine failed' } }));
  const finished = sse.finish(500);
  await nextTurn();
  t.same(
    writes.map((w) => w.text),
    [dataEvent({ text: 'one ' }), `${dataEvent({ text: 'two ' })}${dataEvent({ text: 'thr' })}`],
    'the text and its held-back end left, the error event waits for the entry',
  );
  appended(3);
  await finished;
  t.equal(
    await body,
    `${dataEvent({ text: 'one ' })}${dataEvent({ text: 'two ' })}${dataEvent({ text: 'thr' })}${dataEvent({ error: { message: 'the engine failed' } })}: x-audit-leaf 3\n\ndata: [DONE]\n\n`,
  );
});

t.test('finish(status)', async (t) => {
  t.test('records the status it is given, and nothing made after it is sent', async (t) => {
    const { sse, body, recorded } = await openStream(t);
    sse.event(dataEvent({ error: { message: 'queue full' } }));
    const finished = sse.finish(429);
    sse.event('data: late\n\n');
    sse.text('late text');
    await finished;
    sse.event('data: later\n\n');
    t.equal(await body, `${dataEvent({ error: { message: 'queue full' } })}: x-audit-leaf 7\n\ndata: [DONE]\n\n`);
    t.same(
      recorded.map((r) => r.status),
      [429],
    );
  });

  t.test('a call not audited has no leaf comment; without a last event none is sent', async (t) => {
    const { sse, body, recorded } = await openStream(t, {
      record: (sha, status) => {
        recorded.push({ sha, status });
        return null;
      },
      done: null,
    });
    sse.event('data: only\n\n');
    await sse.finish();
    t.equal(await body, 'data: only\n\n');
    t.equal(recorded.length, 1, 'it was still asked');
  });

  t.test('an audit entry that cannot be appended: its error event in place of the leaf, then the last event', async (t) => {
    const { sse, body, errors } = await openStream(t, { record: () => Promise.reject(new Error('disk full')) });
    sse.event('data: answer\n\n');
    await sse.finish();
    const received = await body;
    const [answer, failure, done] = received.split('\n\n');
    t.equal(answer, 'data: answer');
    t.match(JSON.parse(failure.slice('data: '.length)), { error: { code: 'audit_unavailable' } });
    t.equal(done, 'data: [DONE]');
    t.same(errors, ['the audit log could not record a call']);
  });
});

t.test('a scrubber that fails: told once, and no more of the text is sent', async (t) => {
  const failures: Error[] = [];
  let pushes = 0;
  const scrubber: TextScrubber = {
    push(piece) {
      if (++pushes === 2) throw new Error('too long to judge');
      return piece;
    },
    end() {
      throw new Error('end must not be reached after a failure');
    },
  };
  const { sse, body } = await openStream(t, { scrubber, onScrubFailure: (err) => failures.push(err) });
  sse.text('fine ');
  await nextTurn();
  sse.text('boom');
  await nextTurn();
  sse.text('after');
  await nextTurn();
  t.equal(failures.length, 1);
  t.equal(failures[0].message, 'too long to judge');
  t.equal(sse.scrubFailure, failures[0]);
  t.equal(pushes, 2, 'the text after the failure never reached the scrubber');
  sse.endText();
  await sse.finish(500);
  t.equal(await body, `${dataEvent({ text: 'fine ' })}: x-audit-leaf 7\n\ndata: [DONE]\n\n`);
});

t.test('a client that goes away: nothing more is written, and the stream still finishes and is recorded', async (t) => {
  const { sse, res, writes, response, recorded } = await openStream(t);
  sse.event('data: first\n\n');
  const client = await response;
  await new Promise((resolve) => client.once('data', resolve));
  const closed = new Promise((resolve) => res.once('close', resolve));
  client.destroy();
  await closed;
  const before = writes.length;
  sse.event('data: unseen\n\n');
  sse.text('unseen text');
  await nextTurn();
  await sse.finish();
  t.equal(writes.length, before, 'no write once the client has gone');
  t.equal(res.writableEnded, false, 'nor an end');
  t.same(
    recorded,
    [{ sha: sha256(`data: first\n\ndata: unseen\n\n${dataEvent({ text: 'unseen text' })}`), status: 200 }],
    'the digest covers what was made for it',
  );
});
