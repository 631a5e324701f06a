// SHA-256 of model files, cached by (path, size, mtime, ctime, inode) in lmdb so a reboot does not rehash gigabytes.
// Any write to the file changes its ctime, which (unlike mtime, which `touch -r` puts back) no user can set: the
// kernel stamps it on every change of content or metadata. So a byte flipped in place always forces a rehash.
import { createHash } from 'node:crypto';
import { constants, statSync, type BigIntStats } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';

interface CachedHash {
  size: number;
  /** Nanoseconds, as decimal strings (lmdb's msgpack keeps them exact; a double would round them). */
  mtimeNs: string;
  ctimeNs: string;
  ino: string;
  sha256: string;
}

/** The cache key of a file's current state; records written before ctime was part of it never match. */
function identity(stat: BigIntStats): Omit<CachedHash, 'sha256'> {
  return { size: Number(stat.size), mtimeNs: String(stat.mtimeNs), ctimeNs: String(stat.ctimeNs), ino: String(stat.ino) };
}

function sameFile(a: Omit<CachedHash, 'sha256'>, b: Omit<CachedHash, 'sha256'>): boolean {
  return a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs && a.ino === b.ino;
}

/** Checksums the operator recorded with `models import` for manifest entries that have none. */
export interface Pin {
  sha256: string;
  size: number;
  pinnedAt: string;
}

export type Progress = (done: number, total: number) => void;

/** A file's identity as the daemon compares it (size, mtime, ctime, inode), from a stat of the file itself. */
export function fileIdentity(stat: BigIntStats): string {
  return `${stat.size}:${stat.mtimeNs}:${stat.ctimeNs}:${stat.ino}`;
}

/**
 * Opens a model file for reading, refusing what is not a regular file. What is read, stat'ed and handed to an engine
 * through the handle is one file, whatever the path names a moment later (a symlink or a rename can point it at
 * another between a stat and an open). O_NONBLOCK: a FIFO put in a model's place would otherwise hold the open, and
 * every scan behind it, until something writes to it.
 */
export async function openModelFile(path: string): Promise<FileHandle> {
  const file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    if (!(await file.stat()).isFile()) throw new Error(`${path} is not a regular file`);
    return file;
  } catch (err) {
    await file.close();
    throw err;
  }
}

/** SHA-256 of an open file's bytes, in 4 MiB reads (the daemon keeps answering between them). */
async function hashHandle(file: FileHandle, total: number, onProgress?: Progress): Promise<string> {
  const hash = createHash('sha256');
  const buffer = Buffer.allocUnsafe(4 * 1024 * 1024);
  let done = 0;
  let lastReport = 0;
  for (;;) {
    const { bytesRead } = await file.read(buffer, 0, buffer.length, done);
    if (bytesRead === 0) break;
    hash.update(buffer.subarray(0, bytesRead));
    done += bytesRead;
    if (onProgress && (done - lastReport > 256 * 1024 * 1024 || done === total)) {
      lastReport = done;
      onProgress(done, total);
    }
  }
  return hash.digest('hex');
}

export async function hashFile(path: string, onProgress?: Progress): Promise<string> {
  const file = await openModelFile(path);
  try {
    return await hashHandle(file, (await file.stat()).size, onProgress);
  } finally {
    await file.close();
  }
}

export class ModelVerifier {
  private readonly hashes: Database<CachedHash, string>;
  private readonly pins: Database<Pin, string>;

  constructor(store: Store) {
    this.hashes = store.db<CachedHash>('model-hashes');
    this.pins = store.db<Pin>('model-pins');
  }

  /**
   * The file's SHA-256, from the cache when the file is unchanged since it was last hashed; `identity` is the file's
   * (fileIdentity) when the checksum is its bytes', null when the file changed while it was read (then the checksum
   * belongs to no file and nothing is cached). The stats and the read go through one handle: a path pointed at another
   * file meanwhile cannot put one file's checksum under another's identity.
   */
  async sha256(path: string, onProgress?: Progress): Promise<{ sha256: string; cached: boolean; identity: string | null }> {
    const file = await openModelFile(path);
    try {
      const stat = await file.stat({ bigint: true });
      const before = identity(stat);
      const cached = this.hashes.get(path);
      if (cached && sameFile(cached, before)) return { sha256: cached.sha256, cached: true, identity: fileIdentity(stat) };
      const sha256 = await hashHandle(file, before.size, onProgress);
      const after = await file.stat({ bigint: true });
      if (!sameFile(identity(after), before)) return { sha256, cached: false, identity: null };
      // Only a cache: a full disk does not stop the model being served (it is hashed again at the next start).
      await this.hashes.put(path, { ...before, sha256 }).catch(() => false);
      return { sha256, cached: false, identity: fileIdentity(after) };
    } finally {
      await file.close();
    }
  }

  /** Records a hash computed elsewhere (by import, which just read every byte) for a file it wrote. */
  async remember(path: string, sha256: string): Promise<void> {
    await this.hashes.put(path, { ...identity(statSync(path, { bigint: true })), sha256 });
  }

  pin(id: string): Pin | undefined {
    return this.pins.get(id);
  }

  async setPin(id: string, pin: Pin): Promise<void> {
    await this.pins.put(id, pin);
  }
}
