// The fit rule. A model fits when its weights, its KV cache at the serving context (for every parallel sequence)
// and the compute buffers, as node-llama-cpp's GGUF insights estimate them for CPU memory, are at most what is
// left of the probed available RAM after the configured headroom and after the models listed before it. The
// manifest's own `needs.ramBytes` is a floor: the larger of the two counts. Models are taken in manifest order,
// so the operator orders the manifest by priority. Counting everything in RAM even when a GPU could take layers
// keeps the rule conservative: a listed model never fails for memory.
import { GgufInsights, readGgufFileInfo, type Llama } from 'node-llama-cpp';
import { servingContextOf, type ManifestEntry } from './manifest.js';

export interface RamEstimate {
  bytes: number;
  /** How the number was reached, for `models list` and health. */
  basis: string;
}

export async function estimateRam(entry: ManifestEntry, path: string, llama: Llama, parallel: number): Promise<RamEstimate> {
  const floor = entry.needs.ramBytes;
  if (entry.engine !== 'llama.cpp') return { bytes: floor, basis: 'manifest needs.ramBytes' };
  const info = await readGgufFileInfo(path, { readTensorInfo: true, ignoreKeys: [] });
  const insights = await GgufInsights.from(info, llama);
  const weights = insights.estimateModelResourceRequirements({ gpuLayers: 0 }).cpuRam;
  const isEmbedding = entry.capability === 'embeddings';
  const context = insights.estimateContextResourceRequirements({
    contextSize: servingContextOf(entry),
    modelGpuLayers: 0,
    sequences: isEmbedding ? 1 : parallel,
    isEmbeddingContext: isEmbedding,
    includeGraphOverhead: true,
  }).cpuRam;
  const estimated = weights + context;
  return estimated >= floor
    ? { bytes: estimated, basis: `GGUF insights: weights ${weights} B + context ${context} B` }
    : { bytes: floor, basis: 'manifest needs.ramBytes (above the GGUF estimate)' };
}
