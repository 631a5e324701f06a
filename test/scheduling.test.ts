// Fair scheduling through the daemon, on the real llama.cpp engine with one slot (and the guest slot kept for a
// project that holds none): a project that floods the model does not keep others' calls waiting behind its queue; a
// call that waited says how long; health shows the queue by service tier; the answer names the tier that served it.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import OpenAI from 'openai';
import { makeModelFixtures } from './fixtures/models.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const dataDir = join(dir, 'data');
const config = join(dir, 'config.json');
writeFileSync(config, JSON.stringify({ dataDir, models: { parallel: 1, queue: 8 } }));
const a = createKey(dataDir, 'flood', ['--config', config]);
const b = createKey(dataDir, 'steady', ['--config', config]);
const c = createKey(dataDir, 'another', ['--config', config]);
const daemon = await startDaemon(t, ['--config', config, ...fixtures.args]);
await waitForModels(daemon.baseURL, a.secret, ['tiny-chat']);
const clientA = new OpenAI({ apiKey: a.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const clientB = new OpenAI({ apiKey: b.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const clientC = new OpenAI({ apiKey: c.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const long = { model: 'tiny-chat', messages: [{ role: 'user' as const, content: 'Tell me everything.' }], max_tokens: 150 };

t.test("another project's call goes before a flooding project's queue, and says how long it waited", async (t) => {
  const done: string[] = [];
  // A fills the one slot and queues seven more calls behind it.
  const queued = [0, 1, 2, 3, 4, 5, 6, 7].map((i) =>
    clientA.chat.completions.create({ ...long, seed: i }).then(() => void done.push(`a${i}`)),
  );
  // Once A's calls have reached the model (bounded wait): health shows them queued, by tier.
  type Health = { models: Array<{ id: string; busy: number; waiting: number; waiting_by_tier: Record<string, number> }> };
  let model: Health['models'][number] | undefined;
  for (const until = Date.now() + 5000; Date.now() < until; await new Promise((r) => setTimeout(r, 10))) {
    const health = (await (await fetch(`${daemon.baseURL}/health`, { headers: { authorization: `Bearer ${a.secret}` } })).json()) as Health;
    model = health.models.find((m) => m.id === 'tiny-chat');
    if (model && model.waiting >= 2) break;
  }
  t.equal(model?.busy, 1);
  t.ok(model && model.waiting >= 2, `${model?.waiting} waiting`);
  t.same(model?.waiting_by_tier, { priority: 0, default: model?.waiting, flex: 0 }, 'health shows the queue by tier');

  // B and C, one short call each at the same moment: one is served at once on the slot kept for a project that holds
  // none, the other waits for the next slot (and says how long), and both go before A's queue.
  const short = { ...long, max_tokens: 4 };
  const [bAnswer, cAnswer] = await Promise.all([
    clientB.chat.completions
      .create(short)
      .withResponse()
      .then((r) => (done.push('b'), r)),
    clientC.chat.completions
      .create(short)
      .withResponse()
      .then((r) => (done.push('c'), r)),
  ]);
  t.equal(bAnswer.data.service_tier, 'default', 'the answer names its tier');
  const waits = [bAnswer, cAnswer].map((r) => r.response.headers.get('x-queue-wait-ms'));
  t.equal(waits.filter((w) => w === null).length, 1, `one was served at once (${waits.join(', ')})`);
  t.equal(waits.filter((w) => Number(w) > 0).length, 1, 'the other waited, and says how long');
  await Promise.all(queued);
  t.ok(done.indexOf('b') <= 3 && done.indexOf('c') <= 3, `B and C are served before A's queue (${done.join(', ')})`);
});

t.test('a call that did not wait carries no wait header; tiers are named in chunks and in responses', async (t) => {
  const { response } = await clientB.chat.completions.create({ ...long, max_tokens: 2 }).withResponse();
  t.equal(response.headers.get('x-queue-wait-ms'), null);
  const stream = await clientB.chat.completions.create({ ...long, max_tokens: 2, stream: true, service_tier: 'flex' });
  const tiers = new Set<string | null | undefined>();
  for await (const chunk of stream) tiers.add(chunk.service_tier);
  t.same([...tiers], ['flex']);
  const reply = await clientB.responses.create({ model: 'tiny-chat', input: 'x', max_output_tokens: 2, service_tier: 'priority' });
  t.equal(reply.service_tier, 'priority', 'the device posture lets every key ask for priority');
});
