// Notices files arriving in the models dir while the daemon runs, so a model imported then is listed without a
// restart. fs.watch reports changes at once where the filesystem supports it; a poll every few seconds covers the
// filesystems where it does not (network mounts, overlays) and a models dir that did not exist yet. Either only
// wakes `scan`, which decides from the files' own stat what changed.
import { statSync, watch, type FSWatcher } from 'node:fs';
import { fileIdentity } from '../models/verify.js';

/** A file's identity as the checksum cache sees it; `absent` when there is no file. */
export function fingerprint(path: string): string {
  try {
    const s = statSync(path, { bigint: true });
    if (!s.isFile()) return 'not-a-file';
    return fileIdentity(s);
  } catch {
    return 'absent';
  }
}

export interface ModelsDirWatch {
  /** Asks for a scan after the debounce (a file that was still changing is looked at again). */
  wake(): void;
  /** Stops watching; resolves when a scan under way has ended. */
  close(): Promise<void>;
}

/**
 * Calls `scan` when the directory may have changed: after `debounceMs` of quiet following a change event, and every
 * `pollMs` regardless. Never runs two scans at once; a wake-up during a scan runs one more after it.
 */
export function watchModelsDir(dir: string, options: { pollMs: number; debounceMs: number; scan: () => Promise<void> }): ModelsDirWatch {
  let closed = false;
  let running: Promise<void> | null = null;
  let again = false;
  let debounce: NodeJS.Timeout | undefined;

  const run = () => {
    if (closed) return;
    if (running) {
      again = true;
      return;
    }
    running = options
      .scan()
      .catch(() => undefined)
      .finally(() => {
        running = null;
        if (again && !closed) {
          again = false;
          run();
        }
      });
  };
  const wake = () => {
    clearTimeout(debounce);
    debounce = setTimeout(run, options.debounceMs);
    debounce.unref();
  };

  let watcher: FSWatcher | null = null;
  try {
    watcher = watch(dir, { persistent: false }, wake);
    watcher.on('error', () => watcher?.close());
  } catch {
    // No such directory yet, or no inotify here: the poll alone notices.
  }
  const poll = setInterval(run, options.pollMs);
  poll.unref();

  return {
    wake,
    async close() {
      closed = true;
      clearTimeout(debounce);
      clearInterval(poll);
      watcher?.close();
      await running;
    },
  };
}
