// The demo set that `sovereign models demo` writes: a chat model, an embeddings model and a whisper model with random
// weights, plus the manifest that lists them (every entry marked `demo`), all in one directory that `sovereign serve
// --models-dir DIR --manifest DIR/models-manifest.json` serves on the device posture. The real engines run them; their
// answers mean nothing. Every byte is derived from fixed options and seeds, so a second run recognises the files it
// wrote by their SHA-256 and leaves them alone.
import { createHash } from 'node:crypto';
import { closeSync, fsyncSync, lstatSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DEMO_LABEL } from '../demo.js';
import { checkManifest, type ManifestEntry } from '../manifest.js';
import { tinyGguf } from './gguf.js';
import { TINY_WHISPER_CONTEXT, TINY_WHISPER_FACTS, tinyWhisperModel } from './whisper.js';

export const DEMO_MANIFEST_FILE = 'models-manifest.json';

/** What happened to one file: written (it was not there), kept (already these bytes), replaced (--force: written again). */
export type DemoOutcome = 'written' | 'kept' | 'replaced';

export interface DemoFile {
  /** The model id, or null for the manifest. */
  id: string | null;
  file: string;
  path: string;
  size: number;
  sha256: string;
  outcome: DemoOutcome;
}

export interface DemoModels {
  dir: string;
  /** The manifest's path: what `sovereign serve --manifest` takes. */
  manifest: string;
  files: DemoFile[];
}

/** A file in the way that is not the one this command writes (exit 1; --force replaces it). */
export class DemoError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DemoError';
  }
}

const OWNED_BY = `sovereign demo (${DEMO_LABEL})`;
const SOURCE = 'generated on this machine by sovereign models demo; not a trained model';
const NEEDS = { ramBytes: 0, vramBytes: 0, gpuRequired: false };

/** One file of the set: its bytes and, for a model, its manifest entry (which needs the bytes' size and SHA-256). */
interface Planned {
  id: string | null;
  file: string;
  bytes: Buffer;
}

const sha256Of = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
const millions = (n: number) => `${(n / 1e6).toFixed(2)}M`;

/** The three models and their entries. The chat model is the test suite's tiny chat model under another name. */
function demoSet(): Array<{ bytes: Buffer; entry: ManifestEntry }> {
  const pinned = (bytes: Buffer) => ({ sha256: sha256Of(bytes), size: bytes.length });
  const chat = tinyGguf({ seed: 42, name: 'sovereign-demo-chat (random weights)' });
  const embed = tinyGguf({ seed: 7, embedding: 32, heads: 2, name: 'sovereign-demo-embed (random weights)' });
  const whisper = tinyWhisperModel({ seed: 7 });
  const common = { languages: ['ar', 'en'], needs: NEEDS, ownedBy: OWNED_BY, license: 'none', source: SOURCE, demo: true };
  return [
    {
      bytes: chat.bytes,
      entry: {
        id: 'demo-chat',
        file: 'demo-chat.gguf',
        ...pinned(chat.bytes),
        capability: 'chat',
        engine: 'llama.cpp',
        context: chat.gguf.contextLength,
        servingContext: chat.gguf.contextLength,
        parameters: millions(chat.gguf.parameterCount),
        gguf: chat.gguf,
        ...common,
      },
    },
    {
      bytes: embed.bytes,
      entry: {
        id: 'demo-embed',
        file: 'demo-embed.gguf',
        ...pinned(embed.bytes),
        capability: 'embeddings',
        engine: 'llama.cpp',
        context: embed.gguf.contextLength,
        servingContext: 512,
        parameters: millions(embed.gguf.parameterCount),
        gguf: embed.gguf,
        ...common,
      },
    },
    {
      bytes: whisper,
      entry: {
        id: 'demo-whisper',
        file: 'demo-whisper.bin',
        ...pinned(whisper),
        capability: 'transcription',
        engine: 'whisper.cpp',
        context: TINY_WHISPER_CONTEXT,
        ggml: TINY_WHISPER_FACTS,
        ...common,
      },
    },
  ];
}

/** The manifest's bytes: validated here as the daemon will validate them, so a demo set never fails to start. */
function manifestBytes(entries: ManifestEntry[]): Buffer {
  const manifest = {
    $comment:
      `Written by 'sovereign models demo': tiny models with ${DEMO_LABEL} (chat, embeddings, speech to text). ` +
      'Their answers mean nothing. Only the device posture serves them (demo: true).',
    models: entries,
  };
  checkManifest(manifest, 'the demo manifest');
  return Buffer.from(`${JSON.stringify(manifest, null, 2)}\n`);
}

/** Whether `path` already holds exactly `bytes`: absent, the same, or something else (a file, a directory, a link). */
function existing(path: string, bytes: Buffer): 'absent' | 'same' | 'other' {
  let stat;
  try {
    stat = lstatSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
    throw err;
  }
  // Read only a regular file of the expected size: whatever else is there is not ours, however large.
  if (!stat.isFile() || stat.size !== bytes.length) return 'other';
  return sha256Of(readFileSync(path)) === sha256Of(bytes) ? 'same' : 'other';
}

/** Writes `bytes` beside `path` and renames it into place, so that no reader (the daemon's watcher) sees a partial file. */
function writeAtomically(dir: string, path: string, file: string, bytes: Buffer): void {
  const temporary = join(dir, `.${file}.${process.pid}.tmp`);
  const fd = openSync(temporary, 'wx', 0o644);
  try {
    for (let done = 0; done < bytes.length;) done += writeSync(fd, bytes, done);
    fsyncSync(fd);
    closeSync(fd);
    renameSync(temporary, path);
  } catch (err) {
    try {
      closeSync(fd);
    } catch {
      /* already closed */
    }
    rmSync(temporary, { force: true });
    throw err;
  }
}

/**
 * Writes the demo models and their manifest into `dir` (made if needed). Files already holding exactly these bytes are
 * kept. Any other file under one of their names stops it before anything is written. `force` writes every file again,
 * whatever is there. `onFile` hears of each file as it is settled.
 */
export function writeDemoModels(options: { dir: string; force: boolean; onFile?: (file: DemoFile) => void }): DemoModels {
  const dir = resolve(options.dir);
  const set = demoSet();
  const planned: Planned[] = [
    ...set.map(({ bytes, entry }) => ({ id: entry.id, file: entry.file, bytes })),
    { id: null, file: DEMO_MANIFEST_FILE, bytes: manifestBytes(set.map((s) => s.entry)) },
  ];
  mkdirSync(dir, { recursive: true });
  const states = planned.map((p) => existing(join(dir, p.file), p.bytes));
  const others = planned.filter((_, i) => states[i] === 'other').map((p) => join(dir, p.file));
  if (others.length && !options.force) {
    throw new DemoError(
      `${others.join(', ')} ${others.length === 1 ? 'is' : 'are'} not what 'sovereign models demo' writes; nothing was ` +
        `written. Choose another --dir, or run it again with --force to replace ${others.length === 1 ? 'it' : 'them'}`,
    );
  }
  const files = planned.map((p, i): DemoFile => {
    const path = join(dir, p.file);
    const state = states[i];
    const write = state !== 'same' || options.force;
    if (write) writeAtomically(dir, path, p.file, p.bytes);
    const file: DemoFile = {
      id: p.id,
      file: p.file,
      path,
      size: p.bytes.length,
      sha256: sha256Of(p.bytes),
      outcome: !write ? 'kept' : state === 'absent' ? 'written' : 'replaced',
    };
    options.onFile?.(file);
    return file;
  });
  // The renames are durable once the directory is.
  const dirFd = openSync(dir, 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
  return { dir, manifest: join(dir, DEMO_MANIFEST_FILE), files };
}
