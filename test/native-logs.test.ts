// The daemon's output is JSON lines, the native engines' included: whisper.cpp and llama.cpp print what they do when
// a model loads and runs, and each of those lines must reach the log as a structured line (journald and any log
// shipper parse every line), never as raw text on stdout or stderr.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { toFile } from 'openai';
import t, { type Test } from 'tap';
import { NativeLines, type NativeLevel } from '../daemon/engines/whisper/native-log.js';
import { speech } from './fixtures/audio.js';
import { writeTinyGguf } from './fixtures/gguf.js';
import { entry } from './fixtures/models.js';
import { tinyWhisperEntry, writeTinyWhisperModel } from './fixtures/whisper.js';
import { createKey, startDaemon, tempDir, waitForModels } from './helpers/daemon.js';

const dir = tempDir(t);
const modelsDir = join(dir, 'models');
mkdirSync(modelsDir, { recursive: true });
const whisperModel = writeTinyWhisperModel(join(modelsDir, 'tiny-whisper.bin'));
const chatModel = writeTinyGguf(join(modelsDir, 'tiny-chat.gguf'), { seed: 42 });
const manifest = join(dir, 'manifest.json');
writeFileSync(
  manifest,
  JSON.stringify({ models: [tinyWhisperEntry('tiny-whisper.bin', whisperModel), entry('tiny-chat', 'tiny-chat.gguf', 'chat', chatModel)] }),
);
const config = join(dir, 'config.json');
writeFileSync(config, JSON.stringify({ models: { threads: 1, queue: 1 } }));
const clip = speech(dir, 'The branch opens at eight.', 'en');

interface LogLine {
  level: number;
  msg: string;
  engine?: string;
}

/** Every line the daemon printed, parsed; a line that is not a JSON object fails the test, naming it. */
function parsed(t: Test, lines: string[]): LogLine[] {
  const out: LogLine[] = [];
  for (const line of lines) {
    try {
      const entry = JSON.parse(line) as unknown;
      if (entry && typeof entry === 'object' && 'level' in entry && 'msg' in entry) out.push(entry as LogLine);
      else t.fail(`a line that is not a log line: ${line}`);
    } catch {
      t.fail(`a line that is not JSON: ${line}`);
    }
  }
  return out;
}

/** Starts a daemon with both engines' models at `level`, loads them, makes a call on each, stops it: every line it printed. */
async function run(t: Test, level: string): Promise<string[]> {
  const dataDir = join(dir, `data-${level}`);
  const key = createKey(dataDir);
  const daemon = await startDaemon(t, ['--data-dir', dataDir, '--config', config, '--models-dir', modelsDir, '--manifest', manifest], {
    SOVEREIGN_LOG_LEVEL: level,
  });
  await waitForModels(daemon.baseURL, key.secret, ['tiny-whisper', 'tiny-chat']);
  const client = new OpenAI({ apiKey: key.secret, baseURL: daemon.baseURL, maxRetries: 0 });
  const text = await client.audio.transcriptions.create({ file: await toFile(readFileSync(clip), 'clip.wav'), model: 'tiny-whisper' });
  t.ok(text.text.length > 0, 'whisper.cpp transcribed');
  const chat = await client.chat.completions.create({ model: 'tiny-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  t.equal(chat.object, 'chat.completion', 'llama.cpp answered');
  t.equal(await daemon.stop(), 0, 'the daemon stopped cleanly');
  return daemon.logs;
}

t.test('at the default level: nothing but JSON lines, with both engines loaded and called', async (t) => {
  const lines = parsed(t, await run(t, 'info'));
  t.ok(
    lines.some((l) => l.msg === 'sovereign is serving'),
    'the daemon logged',
  );
  t.notOk(
    lines.some((l) => l.engine === 'whisper.cpp' && l.level < 40),
    "whisper.cpp's progress lines are debug",
  );
});

t.test('at debug: whisper.cpp says what it does, each line a JSON line naming the engine', async (t) => {
  const lines = parsed(t, await run(t, 'debug'));
  const native = lines.filter((l) => l.engine === 'whisper.cpp');
  t.ok(native.length >= 10, `whisper.cpp's lines are in the log (${native.length})`);
  t.ok(
    native.some((l) => /whisper_model_load|whisper_init/.test(l.msg)),
    'the model load is among them',
  );
  t.ok(
    native.every((l) => l.msg.length > 0 && !l.msg.endsWith('\n')),
    'one line of whisper.cpp output per log line, without its newline',
  );
});

t.test("whisper.cpp's pieces of output become whole lines, each with the level of the piece that began it", async (t) => {
  const out: Array<[NativeLevel, string]> = [];
  const lines = new NativeLines((level, line) => out.push([level, line]));
  lines.push('info', 'whisper_model_load: loading');
  lines.push('', ' model\nwhisper_model_load: n_vocab = 51865\n');
  lines.push('warn', 'whisper_init: no GPU found\n\n');
  lines.push('error', 'whisper_full: failed');
  lines.push('', ' to encode\r\n');
  lines.push('debug', 'left without a newline');
  t.same(out, [
    ['debug', 'whisper_model_load: loading model'],
    ['debug', 'whisper_model_load: n_vocab = 51865'],
    ['warn', 'whisper_init: no GPU found'],
    ['error', 'whisper_full: failed to encode'],
  ]);
  lines.flush();
  t.same(out.at(-1), ['debug', 'left without a newline'], 'flushed when the route ends');
});
