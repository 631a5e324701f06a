// Any audio container ffmpeg reads (wav, mp3, ogg/opus, webm, m4a, flac) to 16 kHz mono 16-bit PCM, the input the
// whisper.cpp binding takes, delivered in windows so that a long recording is never held whole in memory.
//
// ffmpeg runs as a separate process through execa with an argument array (no shell, nothing from the request in
// its command line), reading a private temporary copy of the upload: MP4/M4A files often keep their index at the
// end, which ffmpeg can only reach in a seekable file, not a pipe. The copy lives in a directory only this user can
// open, and is deleted as soon as ffmpeg has finished with it.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';

export const SAMPLE_RATE = 16_000;
const BYTES_PER_SAMPLE = 2;

/** An upload that is not audio ffmpeg can decode, or that breaks a limit; the message says which. */
/** 16-bit PCM as it arrives in chunks, cut into windows of a fixed size (each its own ArrayBuffer, for the engine). */
export class PcmWindows {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly windowBytes: number) {}

  /** Adds a chunk; returns the windows it completed. */
  push(chunk: Buffer): ArrayBuffer[] {
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    const out: ArrayBuffer[] = [];
    while (this.pendingBytes >= this.windowBytes) out.push(this.take(this.windowBytes));
    return out;
  }

  /** What is left once the audio has ended, in whole samples; null when nothing is. */
  rest(): ArrayBuffer | null {
    const last = this.pendingBytes - (this.pendingBytes % BYTES_PER_SAMPLE);
    return last ? this.take(last) : null;
  }

  private take(size: number): ArrayBuffer {
    const all = Buffer.concat(this.pending, this.pendingBytes);
    const out = new ArrayBuffer(size);
    new Uint8Array(out).set(all.subarray(0, size));
    const rest = all.subarray(size);
    this.pending = rest.length ? [Buffer.from(rest)] : [];
    this.pendingBytes = rest.length;
    return out;
  }
}

export class AudioError extends Error {
  constructor(
    message: string,
    readonly kind: 'not_audio' | 'too_long' | 'empty',
  ) {
    super(message);
  }
}

export interface DecodeOptions {
  /** Seconds of audio per window handed to the engine. */
  windowSeconds: number;
  /** Longest audio accepted, in seconds. */
  maxSeconds: number;
  signal: AbortSignal;
  /** The ffmpeg executable (config speech.ffmpeg). */
  ffmpeg?: string;
}

/** Decoded windows of `windowSeconds` (the last one shorter), in order. */
export async function* decodeWindows(bytes: Uint8Array, options: DecodeOptions): AsyncGenerator<ArrayBuffer> {
  const dir = await mkdtemp(join(tmpdir(), 'sovereign-audio-'));
  const input = join(dir, 'upload');
  let ffmpeg: ReturnType<typeof execa> | undefined;
  try {
    await writeFile(input, bytes, { mode: 0o600 });
    ffmpeg = execa(
      options.ffmpeg ?? 'ffmpeg',
      // -t one second past the limit: enough to tell "too long" without decoding a whole long file.
      ['-nostdin', '-hide_banner', '-loglevel', 'error', '-i', input, '-vn', '-sn', '-dn', '-ac', '1', '-ar', String(SAMPLE_RATE)].concat([
        '-t',
        String(options.maxSeconds + 1),
        '-f',
        's16le',
        'pipe:1',
      ]),
      {
        buffer: { stdout: false, stderr: true },
        stdin: 'ignore',
        cancelSignal: options.signal,
        reject: false,
        maxBuffer: { stderr: 64 * 1024 },
      },
    );
    const windows = new PcmWindows(options.windowSeconds * SAMPLE_RATE * BYTES_PER_SAMPLE);
    let total = 0;
    for await (const chunk of ffmpeg.stdout as AsyncIterable<Buffer>) {
      total += chunk.length;
      if (total > options.maxSeconds * SAMPLE_RATE * BYTES_PER_SAMPLE) {
        ffmpeg.kill();
        throw new AudioError(
          `The audio is longer than ${options.maxSeconds} seconds (speech.maxSeconds). Split it into shorter files.`,
          'too_long',
        );
      }
      yield* windows.push(chunk);
    }
    const result = await ffmpeg;
    if (options.signal.aborted) throw options.signal.reason;
    if (result.exitCode !== 0) {
      const reason =
        String(result.stderr ?? '')
          .split('\n')
          .find(Boolean)
          ?.replace(input, 'the file') ?? `ffmpeg exited with ${result.exitCode}`;
      throw new AudioError(
        `The file is not audio that can be decoded (${reason.slice(0, 200)}). Send wav, mp3, ogg/opus, webm, m4a or flac.`,
        'not_audio',
      );
    }
    if (total < BYTES_PER_SAMPLE) throw new AudioError('The file holds no audio samples.', 'empty');
    const last = windows.rest();
    if (last) yield last;
  } finally {
    // A consumer that stops early (an abort, an engine error) leaves ffmpeg nothing to write to.
    if (ffmpeg && ffmpeg.exitCode === null) ffmpeg.kill();
    await rm(dir, { recursive: true, force: true });
  }
}
