// models-manifest.json: every model the appliance may serve, validated with ajv. Checksums and sizes are null
// where the publisher's exact file is not pinned yet; the operator's `sovereign models import` then records them.
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';

export const CAPABILITIES = ['chat', 'embeddings', 'transcription', 'image'] as const;
export type Capability = (typeof CAPABILITIES)[number];
export const ENGINES = ['llama.cpp', 'whisper.cpp'] as const;
export type EngineName = (typeof ENGINES)[number];

export interface ManifestEntry {
  id: string;
  file: string;
  sha256: string | null;
  size: number | null;
  capability: Capability;
  engine: EngineName;
  languages: string[];
  /** The longest context the model was trained for, in tokens. */
  context: number;
  /** The context the daemon serves it with (memory grows with it); defaults to min(context, 8192). */
  servingContext?: number;
  needs: { ramBytes: number; vramBytes: number; gpuRequired: boolean };
  ownedBy: string;
  parameters?: string;
  license?: string;
  source?: string;
  /** Embeddings only: whether `dimensions` may shorten vectors (Matryoshka-trained models). */
  dimensionsShortenable?: boolean;
  /** llama.cpp entries: what the GGUF header must say (checked at import and at boot, see header.ts). */
  gguf?: GgufFacts;
  /** whisper.cpp entries: the ggml file's hyper-parameters. */
  ggml?: GgmlFacts;
  /**
   * A model with random weights, written by `sovereign models demo` for trying the API on a machine without model
   * files: served on the `device` posture only, labelled as such (see demo.ts).
   */
  demo?: boolean;
}

export interface GgufFacts {
  /** `general.architecture`: llama, qwen2, bert… */
  architecture: string;
  /** The sum of every tensor's element count (quantization does not change it). */
  parameterCount: number;
  /** Tokens in the tokenizer's vocabulary (`tokenizer.ggml.tokens`). */
  vocabularySize: number;
  /** `<arch>.context_length`: the context the model was trained for. */
  contextLength: number;
  /** `<arch>.embedding_length`. */
  embeddingLength: number;
  /** `<arch>.block_count`: layers. */
  blockCount: number;
}

export interface GgmlFacts {
  vocabularySize: number;
  audioContext: number;
  audioState: number;
  audioHeads: number;
  audioLayers: number;
  textContext: number;
  textState: number;
  textHeads: number;
  textLayers: number;
  mels: number;
}

/** The ggml header's hyper-parameters, in the order the file holds them (after its magic). */
export const GGML_FIELDS = [
  'vocabularySize',
  'audioContext',
  'audioState',
  'audioHeads',
  'audioLayers',
  'textContext',
  'textState',
  'textHeads',
  'textLayers',
  'mels',
] as const satisfies ReadonlyArray<keyof GgmlFacts>;

export interface Manifest {
  models: ManifestEntry[];
}

const count = { type: 'integer', minimum: 1 } as const;
const factsSchema = (fields: Record<string, object>) =>
  ({ type: 'object', additionalProperties: false, required: Object.keys(fields), properties: fields }) as const;

const ggufSchema = factsSchema({
  architecture: { type: 'string', pattern: '^[a-z0-9_-]{1,64}$' },
  parameterCount: count,
  vocabularySize: count,
  contextLength: count,
  embeddingLength: count,
  blockCount: count,
});
const ggmlSchema = factsSchema(Object.fromEntries(GGML_FIELDS.map((k) => [k, count])));

const entrySchema = {
  type: 'object',
  // Every entry says what its file's header must hold: without it an entry whose checksum is recorded at import
  // would accept any file.
  allOf: [
    { if: { properties: { engine: { const: 'llama.cpp' } } }, then: { required: ['gguf'], not: { required: ['ggml'] } } },
    { if: { properties: { engine: { const: 'whisper.cpp' } } }, then: { required: ['ggml'], not: { required: ['gguf'] } } },
  ],
  additionalProperties: false,
  required: ['id', 'file', 'sha256', 'size', 'capability', 'engine', 'languages', 'context', 'needs', 'ownedBy'],
  properties: {
    id: { type: 'string', pattern: '^[a-z0-9][a-z0-9._:-]{0,127}$' },
    file: { type: 'string', pattern: '^[^/\\\\]+$', minLength: 1, maxLength: 255 },
    sha256: { anyOf: [{ type: 'string', pattern: '^[0-9a-f]{64}$' }, { type: 'null' }] },
    size: { anyOf: [{ type: 'integer', minimum: 1 }, { type: 'null' }] },
    capability: { enum: CAPABILITIES },
    engine: { enum: ENGINES },
    languages: { type: 'array', minItems: 1, items: { type: 'string', pattern: '^[a-z]{2,3}$' } },
    context: { type: 'integer', minimum: 1 },
    servingContext: { type: 'integer', minimum: 1 },
    needs: {
      type: 'object',
      additionalProperties: false,
      required: ['ramBytes', 'vramBytes', 'gpuRequired'],
      properties: {
        ramBytes: { type: 'integer', minimum: 0 },
        vramBytes: { type: 'integer', minimum: 0 },
        gpuRequired: { type: 'boolean' },
      },
    },
    ownedBy: { type: 'string', minLength: 1 },
    parameters: { type: 'string' },
    license: { type: 'string' },
    source: { type: 'string' },
    dimensionsShortenable: { type: 'boolean' },
    gguf: ggufSchema,
    ggml: ggmlSchema,
    demo: {
      type: 'boolean',
      description:
        'true for a model with random weights (sovereign models demo), for trying the API: served on the device posture only, and labelled so in owned_by',
    },
  },
} as const;

const manifestSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['models'],
  properties: { $comment: { type: 'string' }, models: { type: 'array', items: entrySchema } },
} as const;

const validate = new Ajv({ allErrors: true }).compile<Manifest>(manifestSchema);

export class ManifestError extends Error {
  constructor(path: string, problems: string[]) {
    super(`invalid models manifest ${path}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ManifestError';
  }
}

export function loadManifest(path: string): Manifest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ManifestError(path, [`cannot read it as JSON: ${(err as Error).message}`]);
  }
  return checkManifest(parsed, path);
}

/** Validates a parsed manifest (`source` names it in errors): the schema, then unique ids and files. */
export function checkManifest(parsed: unknown, source: string): Manifest {
  const path = source;
  if (!validate(parsed)) {
    throw new ManifestError(
      path,
      (validate.errors ?? []).map(
        (e) =>
          `${e.instancePath || '(root)'} ${e.message ?? 'is invalid'}${e.params && 'additionalProperty' in e.params ? ` ('${String(e.params.additionalProperty)}')` : ''}`,
      ),
    );
  }
  const manifest: Manifest = parsed;
  const problems: string[] = [];
  const ids = new Set<string>();
  const files = new Set<string>();
  for (const m of manifest.models) {
    if (ids.has(m.id)) problems.push(`model id '${m.id}' appears twice`);
    if (files.has(m.file)) problems.push(`file '${m.file}' appears twice`);
    ids.add(m.id);
    files.add(m.file);
    if (m.servingContext && m.servingContext > m.context) problems.push(`'${m.id}': servingContext exceeds context`);
    if (m.gguf && m.context > m.gguf.contextLength) problems.push(`'${m.id}': context exceeds gguf.contextLength`);
  }
  if (problems.length) throw new ManifestError(path, problems);
  return manifest;
}

export function servingContextOf(entry: ManifestEntry): number {
  return entry.servingContext ?? Math.min(entry.context, 8192);
}
