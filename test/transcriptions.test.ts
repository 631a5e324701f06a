// Speech to text through the official OpenAI client against the running daemon, on the real whisper.cpp engine with
// a tiny generated model (its transcripts are fixed words, "one two three…", one per second of audio, whatever is
// said: the tests check the API contract, formats and timings, not the words). Speech is made with espeak-ng in
// English and Arabic and converted with ffmpeg into every accepted container.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { LANGUAGE_NAMES, languageCode, toVerboseJson } from '../daemon/speech/index.js';
import { convert, speech, type Container } from './fixtures/audio.js';
import { tinyWhisperEntry, writeTinyWhisperModel } from './fixtures/whisper.js';
import { cli, createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const dataDir = join(dir, 'data');
const modelsDir = join(dir, 'models');
mkdirSync(modelsDir, { recursive: true });
const model = writeTinyWhisperModel(join(modelsDir, 'tiny-whisper.bin'));
const manifest = join(dir, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({
    models: [tinyWhisperEntry('tiny-whisper.bin', model)],
  }),
);
const config = join(dir, 'config.json');
writeFileSync(config, JSON.stringify({ models: { threads: 1, queue: 1 }, speech: { maxUploadBytes: 2 * 1024 * 1024, maxSeconds: 60 } }));

const english = speech(dir, 'The branch opens at eight in the morning and closes at four.', 'en');
const arabic = speech(dir, 'يفتح الفرع في الثامنة صباحا', 'ar');

const key = createKey(dataDir);
const daemon = await startDaemon(t, ['--data-dir', dataDir, '--config', config, '--models-dir', modelsDir, '--manifest', manifest]);
await waitForModels(daemon.baseURL, key.secret, ['tiny-whisper']);
const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
const upload = (path: string, name = path.split('/').pop()!) => toFile(readFileSync(path), name);

t.test('every container, json and verbose_json with segment times', async (t) => {
  for (const container of ['wav', 'mp3', 'ogg', 'webm', 'm4a', 'flac'] satisfies Container[]) {
    const file = convert(english, container, dir);
    const json = await client.audio.transcriptions.create({ file: await upload(file), model: 'tiny-whisper', language: 'en' });
    t.type(json.text, 'string', `${container}: json has text`);
    t.ok(json.text.length > 0, `${container}: the engine produced text`);
  }
  const verbose = await client.audio.transcriptions.create({
    file: await upload(english),
    model: 'tiny-whisper',
    language: 'en',
    response_format: 'verbose_json',
  });
  t.equal(verbose.language, 'english');
  t.ok(verbose.duration > 3 && verbose.duration < 8, `duration of the clip (${verbose.duration} s)`);
  t.ok(verbose.segments && verbose.segments.length > 0, 'segments');
  let previous = 0;
  for (const s of verbose.segments ?? []) {
    t.ok(s.start >= previous && s.end > s.start && s.end <= verbose.duration + 1, `segment ${s.id} times ordered (${s.start}-${s.end})`);
    previous = s.start;
  }
});

t.test('language is honoured and reported; detection when absent', async (t) => {
  const ar = await client.audio.transcriptions.create({
    file: await upload(arabic),
    model: 'tiny-whisper',
    language: 'ar',
    response_format: 'verbose_json',
  });
  t.equal(ar.language, 'arabic', 'the language asked for is the one reported');
  const detected = await client.audio.transcriptions.create({
    file: await upload(arabic),
    model: 'tiny-whisper',
    response_format: 'verbose_json',
  });
  // The tiny model detects English whatever it hears (test/fixtures/whisper.ts): named, like a language asked for.
  t.equal(detected.language, 'english', 'a detected language is reported by name');
});

t.test('verbose_json names every language whisper can detect, as OpenAI does; requests and engines keep codes', async (t) => {
  const transcript = (language: string) => ({ language, duration: 1, segments: [], temperature: 0 });
  const named = (language: string) => toVerboseJson(transcript(language), new Set(['segment'])).language;
  t.equal(named('ar'), 'arabic');
  t.equal(named('en'), 'english');
  t.equal(named('de'), 'german', 'detection may find a language a caller cannot ask for');
  t.equal(named('yue'), 'cantonese');
  t.equal(named('ht'), 'haitian creole');
  t.equal(named('xx'), 'xx', 'a code whisper does not list is passed on as it is');
  t.equal(Object.keys(LANGUAGE_NAMES).length, 100, "whisper.cpp's list");
  // What an engine reports (an upstream's verbose_json says names) becomes the code the daemon keeps.
  t.equal(languageCode('Arabic'), 'ar');
  t.equal(languageCode('en'), 'en');
  t.equal(languageCode('haitian creole'), 'ht');
  t.equal(languageCode('haitian'), 'ht', "whisper.cpp's name for it");
  t.equal(languageCode('klingon'), null);
});

t.test('text, srt and vtt', async (t) => {
  const base = { file: await upload(english), model: 'tiny-whisper', language: 'en' } as const;
  const text = await client.audio.transcriptions.create({ ...base, file: await upload(english), response_format: 'text' });
  t.type(text, 'string');
  const srt = await client.audio.transcriptions.create({ ...base, file: await upload(english), response_format: 'srt' });
  t.match(srt, /^1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n.+\n/);
  const vtt = await client.audio.transcriptions.create({ ...base, file: await upload(english), response_format: 'vtt' });
  t.match(vtt, /^WEBVTT\n\n\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}\n/);
  const words = await client.audio.transcriptions.create({
    ...base,
    file: await upload(english),
    response_format: 'verbose_json',
    timestamp_granularities: ['word', 'segment'],
  });
  t.ok(words.words && words.words.length > 0, 'word timings when asked for');
  t.ok(
    words.words?.every((w) => w.end >= w.start),
    'word times are ordered',
  );
});

t.test('bad uploads are refused with clear errors', async (t) => {
  const refuse = async (file: Awaited<ReturnType<typeof toFile>>, extra: Record<string, unknown> = {}) => {
    try {
      await client.audio.transcriptions.create({ file, model: 'tiny-whisper', ...extra });
      return null;
    } catch (err) {
      return err as InstanceType<typeof OpenAI.APIError>;
    }
  };
  const corrupt = await refuse(await toFile(Buffer.from('RIFF....WAVEfmt garbage garbage garbage'), 'broken.wav'));
  t.equal(corrupt?.status, 400);
  t.match(corrupt?.message, /not audio/);
  const empty = await refuse(await toFile(Buffer.alloc(0), 'empty.wav'));
  t.equal(empty?.status, 400);
  const huge = await refuse(await toFile(Buffer.alloc(3 * 1024 * 1024), 'huge.wav'));
  t.equal(huge?.status, 413);
  t.match(huge?.message, /speech\.maxUploadBytes/);
  const text = await refuse(await toFile(Buffer.from('hello'), 'notes.txt', { type: 'text/plain' }));
  t.equal(text?.status, 415);
  const language = await refuse(await upload(english), { language: 'xx' });
  t.equal(language?.status, 400, 'an unknown language is refused before the engine sees it');
  const unknown = await refuse(await upload(english), { model: 'nope' });
  t.equal(unknown?.status, 404);
});

t.test('concurrent transcriptions are bounded by the queue', async (t) => {
  const file = readFileSync(english);
  const calls = Array.from({ length: 6 }, () =>
    fetch(`${daemon.baseURL}/audio/transcriptions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key.secret}` },
      body: (() => {
        const form = new FormData();
        form.append('model', 'tiny-whisper');
        form.append('language', 'en');
        form.append('file', new Blob([file], { type: 'audio/wav' }), 'clip.wav');
        return form;
      })(),
    }),
  );
  const responses = await Promise.all(calls);
  const statuses = responses.map((r) => r.status);
  t.ok(statuses.includes(200), `some are served (${statuses.join(', ')})`);
  const refused = responses.filter((r) => r.status === 503);
  t.ok(refused.length > 0, 'past one running and one waiting, calls are refused');
  t.ok(
    refused.every((r) => r.headers.get('retry-after')),
    'with Retry-After',
  );
});

t.test('long audio is transcribed window by window; a disconnect stops the work', async (t) => {
  const words = 'The committee reviews every loan application above the limit and answers within five working days. ';
  const long = speech(dir, words.repeat(6), 'en');
  const verbose = await client.audio.transcriptions.create({
    file: await upload(long),
    model: 'tiny-whisper',
    language: 'en',
    response_format: 'verbose_json',
  });
  t.ok(verbose.duration > 30, `a recording longer than one window (${verbose.duration} s)`);
  const last = verbose.segments?.at(-1);
  t.ok(last && last.start >= 30, `segments continue past the first 30 s window (last starts at ${last?.start})`);

  // A client that goes away: the daemon answers the next call normally (the model's slot was given back).
  const controller = new AbortController();
  const form = new FormData();
  form.append('model', 'tiny-whisper');
  form.append('file', new Blob([readFileSync(long)], { type: 'audio/wav' }), 'long.wav');
  const abandoned = fetch(`${daemon.baseURL}/audio/transcriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key.secret}` },
    body: form,
    signal: controller.signal,
  }).catch((err: Error) => err);
  await new Promise((r) => setTimeout(r, 300));
  controller.abort();
  t.type(await abandoned, Error, 'the client gave up');
  const after = await client.audio.transcriptions.create({ file: await upload(english), model: 'tiny-whisper', language: 'en' });
  t.type(after.text, 'string', 'the next call is served');
});

t.test('a transcription’s audit entry names the model it ran on', async (t) => {
  // docs/audit.md: an entry's `model` is the served model's id.
  const { response } = await client.audio.transcriptions
    .create({ file: await upload(english), model: 'tiny-whisper', language: 'en' })
    .withResponse();
  const requestId = response.headers.get('x-request-id');
  const out = join(dir, 'transcription-export');
  t.equal(cli(['audit', 'export', '--out', out, '--data-dir', dataDir], { SOVEREIGN_AUDIT_SIGNER: 'software' }).code, 0);
  const entry = readFileSync(join(out, 'entries.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { kind: string; request_id: string; model: string | null; route: string })
    .find((e) => e.kind === 'call' && e.request_id === requestId);
  t.match(entry, { route: '/v1/audio/transcriptions', model: 'tiny-whisper' });
});
