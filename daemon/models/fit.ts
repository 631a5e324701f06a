// The fit rule. A model fits when its weights, its KV cache at the serving context (for every parallel sequence of a
// chat model, for every context of an embeddings model's pool) and the compute buffers (one set per context), as
// node-llama-cpp's GGUF insights estimate them for CPU memory, are at most what is left of the probed available RAM
// after the configured headroom and after the models listed before it. The manifest's own `needs.ramBytes` is a
// floor: the larger of the two counts. Models are taken in manifest order, so the operator orders the manifest by
// priority. Counting everything in RAM even when a GPU could take layers keeps the rule conservative: a listed model
// never fails for memory.
import { statSync } from 'node:fs';
import { GgmlType, GgufInsights, readGgufFileInfo, type GgufFileInfo, type Llama } from 'node-llama-cpp';
import { servingContextOf, type ManifestEntry } from './manifest.js';

export interface RamEstimate {
  bytes: number;
  /** How the number was reached, for `models list` and health. */
  basis: string;
}

export async function estimateRam(
  entry: ManifestEntry,
  path: string,
  llama: Llama,
  parallel: number,
  embeddingContexts: number,
): Promise<RamEstimate> {
  const floor = entry.needs.ramBytes;
  if (entry.engine !== 'llama.cpp') return { bytes: floor, basis: 'manifest needs.ramBytes' };
  const info = await readGgufFileInfo(path, { readTensorInfo: true, ignoreKeys: [] });
  checkTensorExtents(info, statSync(path).size);
  const insights = await GgufInsights.from(info, llama);
  const weights = insights.estimateModelResourceRequirements({ gpuLayers: 0 }).cpuRam;
  const isEmbedding = entry.capability === 'embeddings';
  const perContext = insights.estimateContextResourceRequirements({
    contextSize: servingContextOf(entry),
    modelGpuLayers: 0,
    sequences: isEmbedding ? 1 : parallel,
    isEmbeddingContext: isEmbedding,
    ...(isEmbedding ? { batchSize: servingContextOf(entry) } : {}),
    includeGraphOverhead: true,
  }).cpuRam;
  const context = isEmbedding ? perContext * embeddingContexts : perContext;
  const estimated = weights + context;
  return estimated >= floor
    ? { bytes: estimated, basis: `GGUF insights: weights ${weights} B + context ${context} B` }
    : { bytes: floor, basis: 'manifest needs.ramBytes (above the GGUF estimate)' };
}

/** Bytes per block and elements per block of the tensor types published GGUFs use; others are checked by offset only. */
const BLOCKS: Partial<Record<GgmlType, [bytes: number, elements: number]>> = {
  [GgmlType.F32]: [4, 1],
  [GgmlType.F16]: [2, 1],
  [GgmlType.BF16]: [2, 1],
  [GgmlType.Q4_0]: [18, 32],
  [GgmlType.Q4_1]: [20, 32],
  [GgmlType.Q5_0]: [22, 32],
  [GgmlType.Q5_1]: [24, 32],
  [GgmlType.Q8_0]: [34, 32],
  [GgmlType.Q2_K]: [84, 256],
  [GgmlType.Q3_K]: [110, 256],
  [GgmlType.Q4_K]: [144, 256],
  [GgmlType.Q5_K]: [176, 256],
  [GgmlType.Q6_K]: [210, 256],
};

/**
 * A file whose checksum matches can still be a truncated download pinned by mistake: every tensor's data must lie
 * inside the file, or the model is refused here instead of failing at load.
 */
export function checkTensorExtents(info: GgufFileInfo, fileSize: number): void {
  if (info.splicedParts > 1) return;
  for (const tensor of info.fullTensorInfo ?? []) {
    const start = Number(tensor.fileOffset);
    const block = BLOCKS[tensor.ggmlType];
    const elements = tensor.dimensions.reduce<number>((a, d) => a * Number(d), 1);
    const end = block ? start + Math.ceil(elements / block[1]) * block[0] : start + 1;
    if (end > fileSize) {
      throw new Error(`tensor ${tensor.name} ends at byte ${end} but the file has ${fileSize}: the file is truncated`);
    }
  }
}
