// Decides, for every manifest entry, whether this device can serve it now, and if not, why. The daemon lists
// exactly the entries whose state is 'available'; `sovereign models list` and /v1/health show the rest with reasons.
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Llama } from 'node-llama-cpp';
import type { Posture } from '../config/index.js';
import type { GpuFacts, HardwareFacts } from '../hardware/index.js';
import { demoRefusal, ownedByOf } from './demo.js';
import { headerMismatch } from './header.js';
import type { EngineName, Manifest, ManifestEntry } from './manifest.js';
import type { ModelVerifier, Progress } from './verify.js';

export type Availability =
  | 'available'
  | 'missing'
  | 'size_mismatch'
  | 'checksum_mismatch'
  | 'header_mismatch'
  | 'not_pinned'
  | 'engine_unavailable'
  | 'gpu_required'
  | 'unreadable'
  | 'does_not_fit'
  | 'demo_model';

export interface ModelStatus {
  id: string;
  capability: ManifestEntry['capability'];
  engine: EngineName;
  file: string;
  path: string;
  /** As clients see it (owned_by): a demo model's says it has random weights. */
  ownedBy: string;
  /** A random-weight demo model (`sovereign models demo`), served on the device posture only. */
  demo: boolean;
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
  /** RAM already promised to models listed earlier (a rescan counts the ones listed before it). */
  reservedBytes?: number;
  /** The sequences a chat model's context holds (config chatSequences): its KV cache is counted for each. */
  parallel: number;
  /** Contexts each embeddings model gets (the llama engine's pool). */
  embeddingContexts: number;
  /** Engines this build can run. */
  engines: ReadonlySet<EngineName>;
  /** The posture that would serve them: demo models are served on `device` only. */
  posture: Posture;
  onHashProgress?: (id: string) => Progress;
}

const GiB = 1024 ** 3;
const gib = (bytes: number) => `${(bytes / GiB).toFixed(2)} GiB`;

/** What the models listed so far leave: RAM (spent in manifest order) and the GPUs the backend can use. */
interface Room {
  budget: number;
  usableGpus: GpuFacts[];
  freeVram: number;
}

export async function assessModels(options: AssessOptions): Promise<ModelStatus[]> {
  const { hardware } = options;
  // Only memory the loaded llama.cpp backend can use counts: nvidia-smi reports the same card again, and reports it
  // even when the backend is CPU-only.
  const usableGpus = hardware.accelerator === false ? [] : hardware.gpus.filter((g) => g.source === 'node-llama-cpp');
  const room: Room = {
    budget: hardware.ram.availableBytes - options.headroomBytes - (options.reservedBytes ?? 0),
    usableGpus,
    freeVram: usableGpus.reduce((sum, g) => sum + g.vramFreeBytes, 0),
  };
  const out: ModelStatus[] = [];
  for (const entry of options.manifest.models) {
    const status: ModelStatus = {
      id: entry.id,
      capability: entry.capability,
      engine: entry.engine,
      file: entry.file,
      path: join(options.modelsDir, entry.file),
      ownedBy: ownedByOf(entry),
      demo: entry.demo === true,
      present: false,
      verified: false,
      fits: null,
      requiredRamBytes: null,
      state: 'available',
      reason: '',
    };
    out.push(status);
    let verdict: Verdict | null;
    // Before the file is looked at: whatever state the file is in, this posture does not serve it.
    const refusal = demoRefusal(entry, options.posture);
    if (refusal !== null) {
      [status.state, status.reason] = ['demo_model', refusal];
      status.present = existsSync(status.path);
      continue;
    }
    try {
      // The budget is shared, so fit is decided in manifest order.
      verdict = (await checkFile(entry, status, options)) ?? (await checkFit(entry, status, options, room));
    } catch (err) {
      // One unreadable file (permissions, I/O error, a directory in its place) is that entry's problem only.
      verdict = ['unreadable', `cannot read it as a model: ${(err as Error).message}`];
    }
    [status.state, status.reason] = verdict ?? ['available', `verified; needs ${gib(status.requiredRamBytes ?? 0)} of RAM`];
  }
  return out;
}

/** Why an entry is not served, and what to tell the operator. */
type Verdict = [Availability, string];

/** Whether the file is in place and is the entry's model (size, engine, checksum, header), or why not. */
async function checkFile(entry: ManifestEntry, status: ModelStatus, options: AssessOptions): Promise<Verdict | null> {
  const path = status.path;
  if (!existsSync(path))
    return ['missing', `file ${entry.file} is not in ${options.modelsDir}; import it with 'sovereign models import FILE'`];
  status.present = true;
  const pin = options.verifier.pin(entry.id);
  const expectedSize = entry.size ?? pin?.size ?? null;
  const expectedSha = entry.sha256 ?? pin?.sha256 ?? null;
  const size = statSync(path).size;
  if (expectedSize !== null && size !== expectedSize) {
    return ['size_mismatch', `file is ${size} bytes, the manifest says ${expectedSize}: it is truncated or not this model`];
  }
  if (!options.engines.has(entry.engine)) return ['engine_unavailable', `the ${entry.engine} engine is not part of this build`];
  if (expectedSha === null) {
    return [
      'not_pinned',
      `no checksum is known for it: run 'sovereign models import ${entry.file} --id ${entry.id}' to verify and record it`,
    ];
  }
  const { sha256 } = await options.verifier.sha256(path, options.onHashProgress?.(entry.id));
  if (sha256 !== expectedSha) {
    return ['checksum_mismatch', `SHA-256 ${sha256} does not match the expected ${expectedSha}: the file was altered or is another model`];
  }
  // After the checksum, so that an altered file is reported as altered; checked for pinned entries too, where it
  // catches a manifest whose checksum belongs to another model.
  const mismatch = await headerMismatch(entry, path);
  if (mismatch !== null) return ['header_mismatch', `${mismatch}: this file is not ${entry.id}`];
  status.verified = true;
  return null;
}

/** Whether a verified model fits the GPU and the RAM left in `room` (which it then takes), or why not. */
async function checkFit(entry: ManifestEntry, status: ModelStatus, options: AssessOptions, room: Room): Promise<Verdict | null> {
  const { usableGpus, freeVram } = room;
  if (entry.needs.gpuRequired && (usableGpus.length === 0 || freeVram < entry.needs.vramBytes)) {
    status.fits = false;
    const found = usableGpus.length ? `${gib(freeVram)} free` : 'no GPU the llama.cpp backend can use';
    return ['gpu_required', `needs a GPU with ${gib(entry.needs.vramBytes)} free; the probe found ${found}`];
  }
  const { estimateRam } = await import('./fit.js');
  const estimate = await estimateRam(entry, status.path, await options.llama(), options.parallel, options.embeddingContexts);
  status.requiredRamBytes = estimate.bytes;
  if (estimate.bytes > room.budget) {
    status.fits = false;
    return [
      'does_not_fit',
      `needs ${gib(estimate.bytes)} (${estimate.basis}); ${gib(Math.max(0, room.budget))} is left of ${gib(options.hardware.ram.availableBytes)} available after ${gib(options.headroomBytes)} headroom and the models listed before it`,
    ];
  }
  status.fits = true;
  room.budget -= estimate.bytes;
  return null;
}
