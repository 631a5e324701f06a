// How much the data directory holds and how much room its filesystem has left: what "disk nearly full" and "full in"
// are computed from. The walk is asynchronous and runs once a minute: a data directory holds few files (lmdb's,
// the audit journal, vector graphs, images for an hour), so it stays short.
import { readdir, lstat, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import type { DiskSample } from './types.js';

async function allocated(path: string): Promise<number> {
  const info = await lstat(path).catch(() => null);
  if (!info) return 0;
  if (!info.isDirectory()) return info.blocks * 512;
  const names = await readdir(path).catch(() => [] as string[]);
  let sum = info.blocks * 512;
  for (const name of names) sum += await allocated(join(path, name));
  return sum;
}

export async function sampleDisk(dataDir: string): Promise<DiskSample> {
  const fs = await statfs(dataDir);
  return { used: await allocated(dataDir), free: fs.bavail * fs.bsize, total: fs.blocks * fs.bsize };
}

/**
 * Seconds until the filesystem is full at the rate its free space fell between the oldest and the newest sample
 * (null while it is not falling, or with fewer than two samples ten minutes apart: a rate over a shorter span says
 * more about one upload than about the trend).
 */
export function fullIn(samples: Array<{ at: number; free: number }>): number | null {
  if (samples.length < 2) return null;
  const first = samples[0]!;
  const last = samples[samples.length - 1]!;
  const seconds = (last.at - first.at) / 1000;
  if (seconds < 600) return null;
  const perSecond = (first.free - last.free) / seconds;
  if (perSecond <= 0) return null;
  return Math.round(last.free / perSecond);
}
