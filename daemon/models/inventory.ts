// Decides, for every manifest entry, whether this device can serve it now, and if not, why. The daemon lists
// exactly the entries whose state is 'available'; `sovereign models list` and /v1/health show the rest with reasons.
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Llama } from 'node-llama-cpp';
import type { HardwareFacts } from '../hardware/index.js';
import type { EngineName, Manifest, ManifestEntry } from './manifest.js';
import type { ModelVerifier, Progress } from './verify.js';

export type Availability =
  | 'available'
  | 'missing'
  | 'size_mismatch'
  | 'checksum_mismatch'
  | 'not_pinned'
  | 'engine_unavailable'
  | 'gpu_required'
  | 'unreadable'
  | 'does_not_fit';

export interface ModelStatus {
  id: string;
  capability: ManifestEntry['capability'];
  engine: EngineName;
  file: string;
  path: string;
  present: boolean;
  verified: boolean;
  fits: boolean | null;
  requiredRamBytes: number | null;
  state: Availability;
  reason: string;
}

export interface AssessOptions {
  manifest: Manifest;
  modelsDir: string;
  verifier: ModelVerifier;
  /** The llama.cpp runtime, started only if a model gets as far as the fit check. */
  llama: () => Promise<Llama>;
  hardware: HardwareFacts;
  headroomBytes: number;
  parallel: number;
  /** Engines this build can run. */
  engines: ReadonlySet<EngineName>;
  onHashProgress?: (id: string) => Progress;
}

const GiB = 1024 ** 3;
const gib = (bytes: number) => `${(bytes / GiB).toFixed(2)} GiB`;

export async function assessModels(options: AssessOptions): Promise<ModelStatus[]> {
  const { hardware } = options;
  let budget = hardware.ram.availableBytes - options.headroomBytes;
  const freeVram = hardware.gpus.reduce((sum, g) => sum + g.vramFreeBytes, 0);
  const out: ModelStatus[] = [];
  for (const entry of options.manifest.models) {
    const path = join(options.modelsDir, entry.file);
    const status: ModelStatus = {
      id: entry.id,
      capability: entry.capability,
      engine: entry.engine,
      file: entry.file,
      path,
      present: false,
      verified: false,
      fits: null,
      requiredRamBytes: null,
      state: 'missing',
      reason: '',
    };
    out.push(status);
    const set = (state: Availability, reason: string) => {
      status.state = state;
      status.reason = reason;
    };

    if (!existsSync(path)) {
      set('missing', `file ${entry.file} is not in ${options.modelsDir}; import it with 'sovereign models import FILE'`);
      continue;
    }
    status.present = true;
    const pin = options.verifier.pin(entry.id);
    const expectedSize = entry.size ?? pin?.size ?? null;
    const expectedSha = entry.sha256 ?? pin?.sha256 ?? null;
    const size = statSync(path).size;
    if (expectedSize !== null && size !== expectedSize) {
      set('size_mismatch', `file is ${size} bytes, the manifest says ${expectedSize}: it is truncated or not this model`);
      continue;
    }
    if (!options.engines.has(entry.engine)) {
      set('engine_unavailable', `the ${entry.engine} engine is not part of this build`);
      continue;
    }
    if (expectedSha === null) {
      set(
        'not_pinned',
        `no checksum is known for it: run 'sovereign models import ${entry.file} --id ${entry.id}' to verify and record it`,
      );
      continue;
    }
    const { sha256 } = await options.verifier.sha256(path, options.onHashProgress?.(entry.id));
    if (sha256 !== expectedSha) {
      set('checksum_mismatch', `SHA-256 ${sha256} does not match the expected ${expectedSha}: the file was altered or is another model`);
      continue;
    }
    status.verified = true;
    if (entry.needs.gpuRequired && (hardware.gpus.length === 0 || freeVram < entry.needs.vramBytes)) {
      status.fits = false;
      set(
        'gpu_required',
        `needs a GPU with ${gib(entry.needs.vramBytes)} free; the probe found ${hardware.gpus.length ? gib(freeVram) : 'no GPU'}`,
      );
      continue;
    }
    let estimate;
    try {
      const { estimateRam } = await import('./fit.js');
      estimate = await estimateRam(entry, path, await options.llama(), options.parallel);
    } catch (err) {
      set('unreadable', `cannot read it as a model: ${(err as Error).message}`);
      continue;
    }
    status.requiredRamBytes = estimate.bytes;
    if (estimate.bytes > budget) {
      status.fits = false;
      set(
        'does_not_fit',
        `needs ${gib(estimate.bytes)} (${estimate.basis}); ${gib(Math.max(0, budget))} is left of ${gib(hardware.ram.availableBytes)} available after ${gib(options.headroomBytes)} headroom and the models listed before it`,
      );
      continue;
    }
    status.fits = true;
    budget -= estimate.bytes;
    set('available', `verified; needs ${gib(estimate.bytes)} of RAM`);
  }
  return out;
}
