// `sovereign models demo`: random-weight models to try the API with on a machine without model files. Run as a
// newcomer runs it: the CLI writes the models and their manifest, the daemon started with the very flags the CLI
// printed serves them on the device posture through the real engines (a streamed chat, an embedding, a transcription
// through the official OpenAI client), labelled as random weights everywhere; the appliance posture never lists them
// and says why; a second run leaves the files alone.
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { speech } from './fixtures/audio.js';
import { cli, createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';
import { request } from './helpers/http.js';
import { selfSignedCert } from './helpers/tls.js';

const LABEL = /random weights, for trying the API/;
const IDS = ['demo-chat', 'demo-embed', 'demo-whisper'];
const FILES = ['demo-chat.gguf', 'demo-embed.gguf', 'demo-whisper.bin', 'models-manifest.json'];

const dir = tempDir(t, 'sov-demo-');
const dataDir = join(dir, 'data');
const demoDir = join(dataDir, 'demo-models');
const manifest = join(demoDir, 'models-manifest.json');
const serveFlags = ['--models-dir', demoDir, '--manifest', manifest];

const first = cli(['models', 'demo', '--data-dir', dataDir, '--json']);
const key = createKey(dataDir);

t.test('models demo writes three models and a manifest marking them, into the data directory by default', async (t) => {
  t.equal(first.code, 0, first.stderr);
  t.equal(first.json.dir, demoDir);
  t.equal(first.json.manifest, manifest);
  t.same(
    first.json.files.map((f: { file: string; outcome: string }) => [f.file, f.outcome]),
    FILES.map((f) => [f, 'written']),
  );
  const written = JSON.parse(readFileSync(manifest, 'utf8'));
  t.same(
    written.models.map((m: { id: string }) => m.id),
    IDS,
  );
  for (const m of written.models) {
    t.equal(m.demo, true, `${m.id} is marked demo`);
    t.match(m.ownedBy, LABEL, `${m.id} says what it is`);
    t.equal(statSync(join(demoDir, m.file)).size, m.size, `${m.file} is the size its entry pins`);
  }
  t.same(
    written.models.map((m: { capability: string; engine: string }) => [m.capability, m.engine]),
    [
      ['chat', 'llama.cpp'],
      ['embeddings', 'llama.cpp'],
      ['transcription', 'whisper.cpp'],
    ],
  );
  // What it prints is the command that serves them (the device test below starts the daemon with exactly it).
  t.match(first.json.serve.argv, [/bin\/sovereign$/, 'serve', '--data-dir', dataDir, ...serveFlags]);
  t.equal(first.json.serve.argv.length, 8);
});

t.test('a second run leaves the files alone; a file in the way stops it, --force replaces it', async (t) => {
  const before = FILES.map((f) => statSync(join(demoDir, f), { bigint: true }));
  const again = cli(['models', 'demo', '--data-dir', dataDir]);
  t.equal(again.code, 0, again.stderr);
  for (const f of FILES) t.match(again.stdout, new RegExp(`${f.replace('.', '\\.')} .* kept`), `${f} kept`);
  t.match(again.stdout, /random weights/);
  t.match(again.stdout, /\/bin\/sovereign serve --data-dir \S+ --models-dir \S+demo-models --manifest \S+models-manifest\.json/);
  FILES.forEach((f, i) => {
    const after = statSync(join(demoDir, f), { bigint: true });
    t.ok(after.ino === before[i].ino && after.ctimeNs === before[i].ctimeNs, `${f} untouched`);
  });

  const elsewhere = join(dir, 'mine');
  mkdirSync(elsewhere);
  writeFileSync(join(elsewhere, 'models-manifest.json'), '{"models": []}\n');
  const refused = cli(['models', 'demo', '--dir', elsewhere, '--data-dir', dataDir]);
  t.equal(refused.code, 1);
  t.match(refused.stderr, /models-manifest\.json is not what 'sovereign models demo' writes; nothing was written.*--force/);
  t.equal(readFileSync(join(elsewhere, 'models-manifest.json'), 'utf8'), '{"models": []}\n', 'the file in the way is kept');
  const forced = cli(['models', 'demo', '--dir', elsewhere, '--force', '--json', '--data-dir', dataDir]);
  t.equal(forced.code, 0, forced.stderr);
  t.same(
    forced.json.files.map((f: { outcome: string }) => f.outcome),
    ['written', 'written', 'written', 'replaced'],
  );
  t.same(readFileSync(join(elsewhere, 'models-manifest.json')), readFileSync(manifest), 'the same manifest as the first run');
  t.equal(cli(['models', 'demo', 'extra', '--data-dir', dataDir]).code, 2, 'no positional argument');
});

t.test('the device posture serves them through the real engines, labelled as random weights', async (t) => {
  const daemon = await startDaemon(t, first.json.serve.argv.slice(2));
  const health = await waitForModels(daemon.baseURL, key.secret, IDS);
  const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });

  const models = await client.models.list();
  t.same(models.data.map((m) => m.id).sort(), IDS);
  for (const m of models.data) t.match(m.owned_by, LABEL, `${m.id}: owned_by says random weights`);
  for (const m of health.models) t.match(m.owned_by, LABEL, `health: ${m.id}`);
  t.same(health.unavailable_models, []);

  const stream = await client.chat.completions.create({
    model: 'demo-chat',
    messages: [{ role: 'user', content: 'Hello! مرحبا' }],
    max_tokens: 8,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish: string | null = null;
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  t.type(text, 'string');
  t.ok(finish === 'length' || finish === 'stop', `the stream finished (${finish})`);
  t.ok(usage && usage.completion_tokens <= 8 && usage.prompt_tokens > 0, 'usage counted');

  const embedding = await client.embeddings.create({ model: 'demo-embed', input: ['hello world', 'السلام عليكم'] });
  t.equal(embedding.data.length, 2);
  const vector = embedding.data[0].embedding;
  t.equal(vector.length, 32);
  t.ok(Math.abs(Math.hypot(...vector) - 1) < 1e-3, 'unit length');

  const wav = speech(dir, 'The branch opens at eight.', 'en');
  const transcript = await client.audio.transcriptions.create({
    file: await toFile(readFileSync(wav), 'speech.wav'),
    model: 'demo-whisper',
  });
  t.ok(transcript.text.trim().length > 0, `whisper.cpp transcribed it (${transcript.text})`);

  const listed = cli(['models', 'list', '--json', '--data-dir', dataDir, ...serveFlags]);
  t.equal(listed.code, 0, listed.stderr);
  for (const m of listed.json) t.match(m, { listed: true, demo: true, ownedBy: LABEL }, `models list: ${m.id}`);
});

t.test('the appliance posture never lists them, and says why', async (t) => {
  // The same data directory (and key), once the device's daemon has stopped.
  const tls = selfSignedCert(dir);
  const config = join(dir, 'appliance.json');
  writeFileSync(
    config,
    JSON.stringify({ posture: 'appliance', listen: { host: '127.0.0.1' }, tls: { cert: tls.cert, key: tls.key }, dataDir }),
  );
  const reason = /a random-weight demo model is never served on the appliance posture/;

  const listed = cli(['models', 'list', '--config', config, ...serveFlags]);
  t.equal(listed.code, 0, listed.stderr);
  for (const id of IDS) t.match(listed.stdout, new RegExp(`${id} .* no +demo_model: ${reason.source}`), `models list: ${id}`);

  // Run with an appliance configuration, models demo says how to serve them on the device posture. (And --force
  // writes even the files that are already right again.)
  const printed = cli(['models', 'demo', '--dir', demoDir, '--force', '--json', '--config', config]);
  t.equal(printed.code, 0, printed.stderr);
  t.same(
    printed.json.files.map((f: { outcome: string }) => f.outcome),
    ['replaced', 'replaced', 'replaced', 'replaced'],
  );
  t.match(printed.json.serve.argv, [/bin\/sovereign$/, 'serve', '--posture', 'device', '--config', config]);

  const daemon = await startDaemon(t, ['--config', config, ...serveFlags]);
  const headers = { authorization: `Bearer ${key.secret}` };
  // Boot verification runs after the daemon listens: wait until health has a verdict for each of them.
  let health: any;
  for (let i = 0; i < 100; i++) {
    health = (await request(`${daemon.baseURL}/health`, { headers, ca: tls.ca })).json;
    if (health.unavailable_models.length === IDS.length) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  t.same(
    health.unavailable_models.map((m: { id: string; state: string }) => [m.id, m.state]),
    IDS.map((id) => [id, 'demo_model']),
  );
  for (const m of health.unavailable_models) t.match(m.reason, reason);
  t.same(health.models, [], 'not even as loading');
  const models = await request(`${daemon.baseURL}/models`, { headers, ca: tls.ca });
  t.same(models.json.data, []);
  const chat = await request(`${daemon.baseURL}/chat/completions`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo-chat', messages: [{ role: 'user', content: 'hi' }] }),
    ca: tls.ca,
  });
  t.equal(chat.status, 404);
  t.equal(chat.json.error.code, 'model_not_found');
});
