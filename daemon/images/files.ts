// Images answered as `url`: kept in the data directory for a limited time (images.urlTtlSeconds) and served by the
// daemon to keys of the project that made them, at /v1/images/files/<name>. Each file has a sidecar with its
// project and expiry, so URLs outlive a restart until they expire; expired files are removed at start and every
// minute. Names are 144 random bits: not guessable, and not the only protection (the key's project must match).
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { readdir, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CONTENT_TYPES, type ImageFormat } from './normalise.js';

const NAME = /^[A-Za-z0-9_-]{24}\.(png|jpeg|webp)$/;
const SWEEP_MS = 60_000;

interface Sidecar {
  project: string;
  expiresAt: number;
}

interface Log {
  warn(obj: object, msg: string): void;
}

export class ImageFiles {
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly dir: string,
    private readonly ttlMs: number,
    private readonly log: Log,
  ) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    void this.sweep();
    this.timer = setInterval(() => void this.sweep(), SWEEP_MS);
    this.timer.unref();
  }

  /** Keeps an image for the project; returns its file name and when it expires. */
  async save(project: string, bytes: Buffer, format: ImageFormat): Promise<{ name: string; expiresAt: number }> {
    const name = `${randomBytes(18).toString('base64url')}.${format}`;
    const expiresAt = Date.now() + this.ttlMs;
    // The sidecar goes last: a file without one is never served, and is swept.
    await this.writeAtomically(name, bytes);
    await this.writeAtomically(`${name}.json`, Buffer.from(JSON.stringify({ project, expiresAt } satisfies Sidecar)));
    return { name, expiresAt };
  }

  /** The image, if `name` is one of the project's and has not expired; null otherwise (the caller answers 404). */
  async read(project: string, name: string): Promise<{ bytes: Buffer; contentType: string; expiresAt: number } | null> {
    const match = NAME.exec(name);
    if (!match) return null;
    const sidecar = await this.sidecar(name);
    if (!sidecar || sidecar.project !== project || sidecar.expiresAt <= Date.now()) return null;
    try {
      const bytes = await readFile(join(this.dir, name));
      return { bytes, contentType: CONTENT_TYPES[match[1] as ImageFormat], expiresAt: sidecar.expiresAt };
    } catch {
      return null;
    }
  }

  /** Removes expired images, images without a sidecar (a save cut short), and leftovers of interrupted writes. */
  async sweep(now = Date.now()): Promise<number> {
    let removed = 0;
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch {
      return 0;
    }
    const present = new Set(names);
    // A save in progress has a temporary file, or an image whose sidecar is not written yet: left alone for a minute.
    const stale = async (name: string) => {
      try {
        return (await stat(join(this.dir, name))).mtimeMs < now - SWEEP_MS;
      } catch {
        return false;
      }
    };
    for (const name of names) {
      let drop = false;
      if (name.endsWith('.tmp')) drop = await stale(name);
      else if (NAME.test(name)) {
        const sidecar = await this.sidecar(name);
        drop = sidecar ? sidecar.expiresAt <= now : await stale(name);
        if (drop && present.has(`${name}.json`)) await this.remove(`${name}.json`);
      } else if (name.endsWith('.json') && NAME.test(name.slice(0, -5)) && !present.has(name.slice(0, -5))) drop = true;
      if (drop && (await this.remove(name))) removed++;
    }
    return removed;
  }

  close(): void {
    clearInterval(this.timer);
  }

  private async sidecar(name: string): Promise<Sidecar | null> {
    try {
      const parsed = JSON.parse(await readFile(join(this.dir, `${name}.json`), 'utf8')) as Partial<Sidecar>;
      return typeof parsed.project === 'string' && typeof parsed.expiresAt === 'number' ? (parsed as Sidecar) : null;
    } catch {
      return null;
    }
  }

  private async writeAtomically(name: string, bytes: Buffer): Promise<void> {
    const temporary = join(this.dir, `${name}.${randomBytes(6).toString('hex')}.tmp`);
    try {
      await writeFile(temporary, bytes, { mode: 0o600 });
      await rename(temporary, join(this.dir, name));
    } catch (err) {
      // A partial file (a full disk) would only take more of the space that is missing.
      await unlink(temporary).catch(() => {});
      throw err;
    }
  }

  private async remove(name: string): Promise<boolean> {
    try {
      await unlink(join(this.dir, name));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
        this.log.warn({ file: name, err: (err as Error).message }, 'could not remove an image file');
      return false;
    }
  }
}
