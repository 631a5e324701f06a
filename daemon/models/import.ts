// `sovereign models import`: checks a file against the manifest and copies it into the models dir atomically. One
// pass reads the source, hashes it and writes a temporary file beside the destination; only a file whose size and
// SHA-256 match is fsynced and renamed into place, so a crash or a bad file never leaves a half model behind.
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, mkdirSync, openSync, closeSync, fsyncSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { basename, join } from 'node:path';
import { headerMismatch } from './header.js';
import type { Manifest, ManifestEntry } from './manifest.js';
import { hashFile, type ModelVerifier, type Pin, type Progress } from './verify.js';

export class ImportError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ImportError';
  }
}

export interface ImportResult {
  id: string;
  file: string;
  path: string;
  size: number;
  sha256: string;
  /** True when the manifest had no checksum and this import recorded it. */
  pinned: boolean;
  /** The checksum this import replaced: one recorded for a file that was not the model (its header disagreed). */
  replacedPin?: string;
}

/** Why `path` is not `entry`'s model (its header disagrees with the manifest), or null when it is. */
async function notTheModel(entry: ManifestEntry, path: string): Promise<string | null> {
  try {
    return await headerMismatch(entry, path);
  } catch (err) {
    const kind = entry.engine === 'whisper.cpp' ? 'a whisper.cpp ggml model' : 'a GGUF model';
    return `it cannot be read as ${kind} (${(err as Error).message})`;
  }
}

async function identify(source: string, manifest: Manifest, id: string | undefined, onProgress?: Progress): Promise<ManifestEntry> {
  if (id) {
    const entry = manifest.models.find((m) => m.id === id);
    if (!entry) throw new ImportError(`no model '${id}' in the manifest; known ids: ${manifest.models.map((m) => m.id).join(', ')}`);
    return entry;
  }
  const byName = manifest.models.find((m) => m.file === basename(source));
  if (byName) return byName;
  const sha256 = await hashFile(source, onProgress);
  const byHash = manifest.models.find((m) => m.sha256 === sha256);
  if (byHash) return byHash;
  throw new ImportError(`cannot tell which model ${basename(source)} is (its name and checksum match no manifest entry); pass --id ID`);
}

export interface ImportOptions {
  source: string;
  id?: string;
  manifest: Manifest;
  modelsDir: string;
  verifier: ModelVerifier;
  onProgress?: Progress;
  /** What a signed bundle says the file is; checked as well as the manifest. */
  expected?: { sha256: string; size: number };
}

export async function importModel(options: ImportOptions): Promise<ImportResult> {
  const { source, manifest, modelsDir, verifier, onProgress } = options;
  const size = sizeOf(source);
  const entry = await identify(source, manifest, options.id, onProgress);
  const pin = verifier.pin(entry.id);
  checkSize(options, entry, size);
  // Before copying a byte: for an entry whose checksum this import records, the header is all that ties the file to
  // the model it is imported as.
  const mismatch = await notTheModel(entry, source);
  if (mismatch !== null) {
    throw new ImportError(`${basename(source)} is not '${entry.id}': ${mismatch}. Nothing was imported.`);
  }

  mkdirSync(modelsDir, { recursive: true });
  const destination = join(modelsDir, entry.file);
  const stalePin = await pinIsStale(entry, pin, destination, verifier);
  const temporary = join(modelsDir, `.${entry.file}.partial-${process.pid}`);
  let sha256: string;
  try {
    sha256 = await copyHashing(source, temporary, size, onProgress);
  } catch (err) {
    throw new ImportError(`copying ${source} failed: ${(err as Error).message}`);
  }
  const rejected = await rejectCopy(options, entry, { temporary, sha256, pin, stalePin });
  if (rejected !== null) {
    rmSync(temporary, { force: true });
    throw new ImportError(rejected);
  }
  moveIntoPlace(temporary, destination, modelsDir);
  await verifier.remember(destination, sha256);
  const pinned = (entry.sha256 ?? null) === null;
  if (pinned) await verifier.setPin(entry.id, { sha256, size, pinnedAt: new Date().toISOString() });
  const replacedPin = pinned && stalePin && pin && pin.sha256 !== sha256 ? pin.sha256 : undefined;
  return { id: entry.id, file: entry.file, path: destination, size, sha256, pinned, ...(replacedPin ? { replacedPin } : {}) };
}

function sizeOf(source: string): number {
  try {
    return statSync(source).size;
  } catch (err) {
    throw new ImportError(`cannot read ${source}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/** The source's size MUST be the bundle's (when it comes in one) and the manifest's (when it gives one). */
function checkSize({ source, expected }: ImportOptions, entry: ManifestEntry, size: number): void {
  const expectedSize = entry.size ?? null;
  if (expected && size !== expected.size) {
    throw new ImportError(`${basename(source)} is ${size} bytes; its bundle says ${expected.size}. It is truncated or another file.`);
  }
  if (expectedSize !== null && size !== expectedSize) {
    throw new ImportError(
      `${basename(source)} is ${size} bytes; the manifest says '${entry.id}' is ${expectedSize}. It is truncated or another file.`,
    );
  }
}

/**
 * Whether the checksum recorded for `entry` is stale. A checksum recorded (before header checks existed) for a file
 * that is not the model holds nothing: the file in place proves it, and a file that is the model may replace it.
 */
async function pinIsStale(entry: ManifestEntry, pin: Pin | undefined, destination: string, verifier: ModelVerifier): Promise<boolean> {
  return pin !== undefined && existsSync(destination) && (await verifier.sha256(destination)).sha256 === pin.sha256
    ? (await notTheModel(entry, destination)) !== null
    : false;
}

/** Why the copy in `temporary` MUST NOT be served as `entry` (the first reason found), or null when it may. */
async function rejectCopy(
  { source, expected }: ImportOptions,
  entry: ManifestEntry,
  copy: { temporary: string; sha256: string; pin: Pin | undefined; stalePin: boolean },
): Promise<string | null> {
  const { sha256, pin } = copy;
  const expectedSha = entry.sha256 ?? null;
  if (expectedSha !== null && sha256 !== expectedSha) {
    return `SHA-256 of ${basename(source)} is ${sha256}; the manifest says '${entry.id}' is ${expectedSha}. The file is altered or another model; nothing was imported.`;
  }
  if (expected && sha256 !== expected.sha256) {
    return `SHA-256 of ${basename(source)} is ${sha256}; its signed bundle says ${expected.sha256}. The file was altered after the bundle was signed; nothing was imported.`;
  }
  if (expectedSha === null && pin && pin.sha256 !== sha256 && !copy.stalePin) {
    return `'${entry.id}' was imported before with SHA-256 ${pin.sha256}; this file is ${sha256}. Nothing was imported.`;
  }
  // The header was checked on the source, before copying; the copy is what is served (and, unpinned, what its checksum
  // is recorded for), and the source could have changed in between.
  const copied = await notTheModel(entry, copy.temporary);
  if (copied !== null) {
    return `${basename(source)} changed while it was copied and is no longer '${entry.id}': ${copied}. Nothing was imported.`;
  }
  return null;
}

/** Renames the verified copy into place and fsyncs the directory, so that the rename survives a crash. */
function moveIntoPlace(temporary: string, destination: string, modelsDir: string): void {
  renameSync(temporary, destination);
  const dirFd = openSync(modelsDir, 'r');
  try {
    fsyncSync(dirFd);
  } finally {
    closeSync(dirFd);
  }
}

/**
 * Copies source to destination (created 0644, fsynced) in one read that also hashes it; returns the SHA-256. A
 * failed copy leaves no destination behind.
 */
export async function copyHashing(source: string, destination: string, size: number, onProgress?: Progress): Promise<string> {
  const hash = createHash('sha256');
  const fd = openSync(destination, 'w', 0o644);
  let done = 0;
  let lastReport = 0;
  try {
    for await (const chunk of createReadStream(source, { highWaterMark: 4 * 1024 * 1024 })) {
      const buffer = chunk as Buffer;
      hash.update(buffer);
      for (let off = 0; off < buffer.length;) off += writeSync(fd, buffer, off);
      done += buffer.length;
      if (onProgress && (done - lastReport > 256 * 1024 * 1024 || done === size)) {
        lastReport = done;
        onProgress(done, size);
      }
    }
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(destination, { force: true });
    throw err;
  }
  closeSync(fd);
  return hash.digest('hex');
}
