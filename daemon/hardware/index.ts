// What the device has: memory, cores, CPU features, GPUs. The model fit rule (daemon/models/fit.ts) and
// `sovereign probe` read these facts; nothing else decides what the hardware can run.
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { execa } from 'execa';
import type { Llama } from 'node-llama-cpp';

export interface GpuFacts {
  name: string;
  vramTotalBytes: number;
  vramFreeBytes: number;
  source: 'node-llama-cpp' | 'nvidia-smi';
}

export interface HardwareFacts {
  ram: {
    totalBytes: number;
    /** What a new allocation can get: MemAvailable, capped by the service's cgroup memory limit. */
    availableBytes: number;
    cgroupLimitBytes: number | null;
  };
  cpu: { model: string; cores: number; features: string[] };
  gpus: GpuFacts[];
  /** The GPU backend node-llama-cpp selected, or false for CPU only. */
  accelerator: string | false;
}

/** CPU features that decide which llama.cpp kernels run fast. */
const INTERESTING_FLAGS = [
  'sse4_2',
  'avx',
  'avx2',
  'fma',
  'f16c',
  'avx512f',
  'avx512bw',
  'avx512_vnni',
  'avx_vnni',
  'amx_tile',
  'neon',
  'asimd',
  'sve',
];

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
}

function memInfo(): { total: number; available: number } {
  const text = readText('/proc/meminfo');
  const field = (name: string) => {
    const m = text ? new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text) : null;
    return m ? Number(m[1]) * 1024 : null;
  };
  return { total: field('MemTotal') ?? os.totalmem(), available: field('MemAvailable') ?? os.freemem() };
}

function cgroupLimit(): number | null {
  const raw = readText('/sys/fs/cgroup/memory.max')?.trim();
  if (!raw || raw === 'max') return null;
  const limit = Number(raw);
  if (!Number.isFinite(limit)) return null;
  const used = Number(readText('/sys/fs/cgroup/memory.current')?.trim() ?? 0);
  return Math.max(0, limit - (Number.isFinite(used) ? used : 0));
}

function cpuFacts(): HardwareFacts['cpu'] {
  const info = readText('/proc/cpuinfo') ?? '';
  const flags = new Set((/^(?:flags|Features)\s*:\s*(.*)$/m.exec(info)?.[1] ?? '').split(/\s+/));
  return {
    model: os.cpus()[0]?.model ?? 'unknown',
    cores: os.availableParallelism(),
    features: INTERESTING_FLAGS.filter((f) => flags.has(f)),
  };
}

async function nvidiaGpus(): Promise<GpuFacts[]> {
  const result = await execa('nvidia-smi', ['--query-gpu=name,memory.total,memory.free', '--format=csv,noheader,nounits'], {
    reject: false,
    timeout: 5000,
  });
  if (result.exitCode !== 0 || typeof result.stdout !== 'string') return [];
  return result.stdout
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [name = 'NVIDIA GPU', total = '0', free = '0'] = line.split(',').map((s) => s.trim());
      return {
        name,
        vramTotalBytes: Number(total) * 1024 * 1024,
        vramFreeBytes: Number(free) * 1024 * 1024,
        source: 'nvidia-smi' as const,
      };
    });
}

async function llamaGpus(llama: Llama): Promise<GpuFacts[]> {
  if (llama.gpu === false) return [];
  const [vram, names] = await Promise.all([llama.getVramState(), llama.getGpuDeviceNames()]);
  return [{ name: names.join(', ') || String(llama.gpu), vramTotalBytes: vram.total, vramFreeBytes: vram.free, source: 'node-llama-cpp' }];
}

export async function probeHardware(llama: Llama | null): Promise<HardwareFacts> {
  const mem = memInfo();
  const limit = cgroupLimit();
  const fromLlama = llama ? await llamaGpus(llama) : [];
  // nvidia-smi sees GPUs even when the loaded llama.cpp backend cannot use them: report both.
  const fromSmi = await nvidiaGpus();
  return {
    ram: {
      totalBytes: mem.total,
      availableBytes: limit === null ? mem.available : Math.min(mem.available, limit),
      cgroupLimitBytes: limit,
    },
    cpu: cpuFacts(),
    gpus: [...fromLlama, ...fromSmi],
    accelerator: llama ? llama.gpu : false,
  };
}

/** Threads for inference: the configured number, or every core the probe found (never node-llama-cpp's minimum of 4). */
export function inferenceThreads(configured: number): number {
  return configured > 0 ? configured : os.availableParallelism();
}
