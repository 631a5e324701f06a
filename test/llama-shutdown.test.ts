// SIGTERM with a llama.cpp model loaded and a keep-alive client streaming (README: "SIGTERM drains in-flight calls
// and exits 0"). node-llama-cpp brings signal-exit 3, which re-raises a signal it finds no other listener for; and
// the openai client keeps its connection open once a call ends. The stream must still end with [DONE], the daemon
// exit 0 as soon as it has (not after timeouts.shutdownGraceMs, left at its 30 s default), a second SIGTERM must
// not cut the drain short, and the next boot must count a clean stop.
import { writeFileSync } from 'node:fs';
import t from 'tap';
import OpenAI from 'openai';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = `${dir}/data`;
const key = createKey(dataDir);
const config = `${dir}/config.json`;
// One inference thread: two, on a loaded 2-core machine, can slow generation a hundredfold (threads wait on each
// other), and the stream must end well within the grace period.
writeFileSync(config, JSON.stringify({ models: { threads: 1 } }));
const args = ['--config', config, '--data-dir', dataDir, ...fixtures.args];

/** A fetch for the openai client that keeps what each response's body carried, as text. */
function recordingFetch(bodies: string[]): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (!res.body) return res;
    const at = bodies.push('') - 1;
    const decoder = new TextDecoder();
    const copy = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        bodies[at] += decoder.decode(chunk, { stream: true });
        controller.enqueue(chunk);
      },
    });
    return new Response(res.body.pipeThrough(copy), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

t.test('SIGTERM mid-stream: the stream ends with [DONE], the daemon exits 0 at once after it, the next boot says clean', async (t) => {
  const daemon = await startDaemon(t, args);
  await waitForModels(daemon.baseURL, key.secret, ['tiny-chat']);
  const bodies: string[] = [];
  // The SDK's own fetch (undici), whose connections stay open between calls: keep-alive, as every SDK user has.
  const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0, fetch: recordingFetch(bodies) });
  t.equal(
    (await client.models.list()).data.some((m) => m.id === 'tiny-chat'),
    true,
    'a first call on the connection',
  );

  const stream = await client.chat.completions.create({
    model: 'tiny-chat',
    messages: [{ role: 'user', content: 'count' }],
    max_tokens: 200,
    temperature: 0,
    stream: true,
    // The grammar admits no end before 300 items: the answer runs to max_tokens whatever the random weights say.
    response_format: {
      type: 'json_schema',
      json_schema: { name: 'long', schema: { type: 'array', items: { enum: ['a'] }, minItems: 300 } },
    },
  });
  let chunks = 0;
  let afterSignal = 0;
  let signalledAt = 0;
  let finish: string | null = null;
  const cut = await (async () => {
    for await (const chunk of stream) {
      chunks++;
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (signalledAt) afterSignal++;
      if (chunks === 1) {
        signalledAt = performance.now();
        daemon.proc.kill('SIGTERM');
      }
      // A second signal while the call drains (systemd sends one, an impatient operator another).
      if (afterSignal === 5) daemon.proc.kill('SIGTERM');
    }
  })().then(
    () => null,
    (err: Error) => `${err.message} (${(err.cause as Error | undefined)?.message ?? 'no cause'})`,
  );
  t.equal(cut, null, 'the SDK read the stream to its end without an error');
  t.equal(finish, 'length', 'the answer ran to max_tokens');
  t.ok(afterSignal > 5, `the stream went on after both signals (${afterSignal} chunks after the first)`);
  const body = bodies.at(-1)!;
  t.match(body, /data: \[DONE\]\n\n$/, 'the stream ended with [DONE]');
  t.match(body, /: x-audit-leaf \d+\n/, 'and named its audit leaf');

  const exit = await Promise.race([daemon.exited, new Promise<string>((r) => setTimeout(() => r('still running'), 15_000))]);
  t.equal(exit, 0, 'exit code 0');
  t.equal(daemon.proc.signalCode, null, 'not killed by the signal');
  const seconds = (performance.now() - signalledAt) / 1000;
  t.ok(seconds < 15, `exited ${seconds.toFixed(1)} s after SIGTERM, well within the 30 s grace`);
  if (exit === 'still running') await daemon.exited;
  t.notMatch(daemon.logs.join('\n'), /did not finish within the grace period/, 'nothing was cut at the end of the grace');

  const next = await startDaemon(t, args);
  const health = (await (await fetch(`${next.baseURL}/health`, { headers: { authorization: `Bearer ${key.secret}` } })).json()) as {
    service: { previous_stop: string; crashes: number };
  };
  t.equal(health.service.previous_stop, 'clean', 'the next boot counts a clean stop');
  t.equal(health.service.crashes, 0, 'and no crash');
  t.equal(await next.stop(), 0);
});
