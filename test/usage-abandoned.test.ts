// A call counts in its key's usage however it ends. A client that reads a streamed answer and goes before its end
// (before `data: [DONE]`, which leaves only once the audit entry is on disk) had the model's tokens, and its call is in
// the audit log: the usage the dashboard shows and `sovereign usage export` bills must count it too, with its tokens.
// Runs the real daemon and the real llama.cpp engine on a tiny model.
import http from 'node:http';
import t from 'tap';
import { makeModelFixtures } from './fixtures/models.js';
import { cli, createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = `${dir}/data`;
const key = createKey(dataDir, 'acme');
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-chat']);

interface Streamed {
  requestId: string;
  /** Whether the client read the stream to `data: [DONE]`. */
  done: boolean;
  /** The tokens the model generated, as the stream's usage chunk says (read to the end only). */
  completionTokens: number | null;
}

/** A streamed chat call; with `leave`, the client closes its connection once the first piece of text has arrived. */
function stream(leave: boolean): Promise<Streamed> {
  const body = JSON.stringify({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'hi' }],
    max_tokens: 200,
    stream: true,
    stream_options: { include_usage: true },
  });
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${daemon.baseURL}/chat/completions`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
      },
      (res) => {
        const requestId = String(res.headers['x-request-id']);
        let text = '';
        res.on('data', (chunk: Buffer) => {
          text += chunk.toString('utf8');
          if (leave && /"content":"[^"]/.test(text)) {
            req.destroy();
            resolve({ requestId, done: false, completionTokens: null });
          }
        });
        res.on('end', () => {
          const usage = /"completion_tokens":(\d+)/.exec(text);
          resolve({ requestId, done: text.includes('data: [DONE]'), completionTokens: usage ? Number(usage[1]) : null });
        });
        res.on('error', () => resolve({ requestId, done: false, completionTokens: null }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

t.test('a streamed call its client leaves before the end counts in usage, with its tokens', async (t) => {
  const whole = await stream(false);
  t.ok(whole.done, 'a stream read to its end');
  const left = [await stream(true), await stream(true)];
  t.same(
    left.map((s) => s.done),
    [false, false],
    'two clients left before the end',
  );
  // Stopping the daemon writes the counts it still holds; the export reads what is on disk.
  t.equal(await daemon.stop(), 0);
  const exported = cli(['usage', 'export', '--format', 'jsonl', '--data-dir', dataDir]);
  t.equal(exported.code, 0, exported.stderr);
  const rows = exported.stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { key: string; endpoint: string; requests: number; completion_tokens: number });
  const chat = rows.find((r) => r.key === key.id && r.endpoint === '/v1/chat/completions');
  t.ok(chat, 'the key has a row for chat completions');
  t.equal(chat?.requests, 3, 'every call counts, the two left before their end included');
  // Each left stream had at least the token its client read before leaving.
  t.ok(
    (chat?.completion_tokens ?? 0) >= (whole.completionTokens ?? Infinity) + 2,
    `the left streams' tokens count (${chat?.completion_tokens} in all, ${whole.completionTokens} of them the whole stream's)`,
  );
});
