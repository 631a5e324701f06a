// An upload's audit entry holds the SHA-256 of the body as the client sent it, multipart boundaries and all, as a
// JSON call's does: a document (of several sizes, so that it arrives in several pieces) and a recording.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { speech } from './fixtures/audio.js';
import { makeModelFixtures } from './fixtures/models.js';
import { tinyWhisperEntry, writeTinyWhisperModel } from './fixtures/whisper.js';
import { cli, createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const fixtures = makeModelFixtures(dir);
const whisper = writeTinyWhisperModel(join(fixtures.modelsDir, 'tiny-whisper.bin'));
const manifest = JSON.parse(readFileSync(fixtures.manifest, 'utf8')) as { models: unknown[] };
manifest.models.push(tinyWhisperEntry('tiny-whisper.bin', whisper));
writeFileSync(fixtures.manifest, JSON.stringify(manifest));
const dataDir = join(dir, 'data');
const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, ...fixtures.args]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-embed', 'tiny-whisper']);

/** Sends `form` to `path`; resolves with the digest of the bytes sent and the entry's leaf. */
async function upload(path: string, form: FormData): Promise<{ sha256: string; leaf: number; status: number }> {
  const request = new Request(`${daemon.baseURL}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}` },
    body: form,
  });
  const bytes = Buffer.from(await request.clone().arrayBuffer());
  const response = await fetch(request);
  await response.text();
  return {
    sha256: createHash('sha256').update(bytes).digest('hex'),
    leaf: Number(response.headers.get('x-audit-leaf')),
    status: response.status,
  };
}

t.test("an upload's entry names the digest of the body as sent", async (t) => {
  const sent = [];
  for (const repeat of [10, 5_000, 200_000]) {
    const form = new FormData();
    form.append('knowledge_base', 'kb');
    form.append('file', new Blob(['hello world '.repeat(repeat)], { type: 'text/plain' }), 'a.txt');
    sent.push(await upload('/documents', form));
  }
  const audio = new FormData();
  audio.append('model', 'tiny-whisper');
  audio.append('file', new Blob([readFileSync(speech(dir, 'one two three', 'en'))], { type: 'audio/wav' }), 'a.wav');
  sent.push(await upload('/audio/transcriptions', audio));
  t.same(
    sent.map((s) => s.status),
    [201, 201, 201, 200],
  );

  await daemon.stop();
  const exported = cli(['audit', 'export', '--data-dir', dataDir, '--out', join(dir, 'export')]);
  t.equal(exported.code, 0, exported.stderr);
  // One entry a line, in leaf order.
  const entries = readFileSync(join(dir, 'export', 'entries.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { request_sha256?: string; route?: string });
  for (const { sha256, leaf } of sent) t.equal(entries[leaf]?.request_sha256, sha256, `leaf ${leaf} (${entries[leaf]?.route})`);
});
