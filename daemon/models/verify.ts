// SHA-256 of model files, cached by (path, size, mtime, inode) in lmdb so a reboot does not rehash gigabytes.
// Any change to the file changes one of those and forces a rehash.
import { createHash } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import type { Database } from 'lmdb';
import type { Store } from '../store/index.js';

interface CachedHash {
  size: number;
  mtimeMs: number;
  ino: number;
  sha256: string;
}

/** Checksums the operator recorded with `models import` for manifest entries that have none. */
export interface Pin {
  sha256: string;
  size: number;
  pinnedAt: string;
}

export type Progress = (done: number, total: number) => void;

export async function hashFile(path: string, onProgress?: Progress): Promise<string> {
  const total = statSync(path).size;
  const hash = createHash('sha256');
  let done = 0;
  let lastReport = 0;
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })) {
    hash.update(chunk as Buffer);
    done += (chunk as Buffer).length;
    if (onProgress && (done - lastReport > 256 * 1024 * 1024 || done === total)) {
      lastReport = done;
      onProgress(done, total);
    }
  }
  return hash.digest('hex');
}

export class ModelVerifier {
  private readonly hashes: Database<CachedHash, string>;
  private readonly pins: Database<Pin, string>;

  constructor(store: Store) {
    this.hashes = store.db<CachedHash>('model-hashes');
    this.pins = store.db<Pin>('model-pins');
  }

  /** The file's SHA-256, from the cache when the file is unchanged since it was last hashed. */
  async sha256(path: string, onProgress?: Progress): Promise<{ sha256: string; cached: boolean }> {
    const stat = statSync(path);
    const cached = this.hashes.get(path);
    if (cached && cached.size === stat.size && cached.mtimeMs === stat.mtimeMs && cached.ino === stat.ino) {
      return { sha256: cached.sha256, cached: true };
    }
    const sha256 = await hashFile(path, onProgress);
    const after = statSync(path);
    // Only cache if nothing changed the file while it was being read. Only a cache: a full disk does not stop the
    // model being served (it is hashed again at the next start).
    if (after.size === stat.size && after.mtimeMs === stat.mtimeMs) {
      await this.hashes.put(path, { size: stat.size, mtimeMs: stat.mtimeMs, ino: stat.ino, sha256 }).catch(() => false);
    }
    return { sha256, cached: false };
  }

  /** Records a hash computed elsewhere (by import, which just read every byte) for a file it wrote. */
  async remember(path: string, sha256: string): Promise<void> {
    const stat = statSync(path);
    await this.hashes.put(path, { size: stat.size, mtimeMs: stat.mtimeMs, ino: stat.ino, sha256 });
  }

  pin(id: string): Pin | undefined {
    return this.pins.get(id);
  }

  async setPin(id: string, pin: Pin): Promise<void> {
    await this.pins.put(id, pin);
  }
}
