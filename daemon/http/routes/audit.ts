// GET /v1/audit/anchors: the signed checkpoints (newest first, each with its consistency proof from the one signed
// before it) and the key that signs them; with ?leaf=N, one call's receipt: its entry, the checkpoint that covers
// it and the inclusion proof. Any key may read checkpoints; an entry only by a key of the project that made the call.
import type { FastifyInstance } from 'fastify';
import type { AuditCheckpoint } from '../../audit/index.js';
import { ApiError } from '../../errors/index.js';
import type { PipelineDeps } from '../pipeline.js';

interface AnchorsQuery {
  limit?: string;
  before?: string;
  leaf?: string;
}

// Query values arrive as text and the app's ajv does not coerce types: whole numbers are checked by pattern.
const wholeNumber = { type: 'string', pattern: '^(0|[1-9][0-9]{0,14})$' } as const;
const anchorsQuery = {
  type: 'object',
  additionalProperties: false,
  properties: { limit: wholeNumber, before: wholeNumber, leaf: wholeNumber },
} as const;

const b64 = (proof: Buffer[]) => proof.map((h) => h.toString('base64'));

export function registerAuditRoutes(v1: FastifyInstance, deps: PipelineDeps): void {
  v1.get<{ Querystring: AnchorsQuery }>(
    '/audit/anchors',
    { schema: { querystring: anchorsQuery }, config: { declaration: { auth: true } } },
    async (request) => {
      const audit = deps.audit;
      if (!audit) throw new ApiError('audit_unavailable', 'This server keeps no audit log.');
      const checkpoints = audit.checkpoints;
      const signer = checkpoints?.signer;
      const about = {
        origin: audit.originName,
        signer: signer?.kind ?? null,
        key_id: signer?.keyId.toString('hex') ?? null,
        public_key: signer?.publicKeyPem ?? null,
        attestation_key: signer?.attestationKeyPem ?? null,
        tree_size: audit.log.size,
        problem: audit.health().problem,
      };
      const withProof = (c: AuditCheckpoint, previous: AuditCheckpoint | undefined) => ({
        ...c,
        consistency: previous
          ? { from_seq: previous.seq, from_size: previous.size, proof: b64(audit.log.consistency(previous.size, c.size)) }
          : null,
      });

      const leaf = request.query.leaf === undefined ? undefined : Number(request.query.leaf);
      if (leaf !== undefined) {
        const bytes = audit.log.entry(leaf);
        const entry = bytes ? (JSON.parse(bytes.toString('utf8')) as { project?: string }) : undefined;
        // Another project's entry is reported exactly like a missing one.
        if (!entry || entry.project !== request.call.principal!.projectId) {
          throw new ApiError('not_found', `No audit entry ${leaf} for this key's project.`, { param: 'leaf' });
        }
        const covering = checkpoints?.covering(leaf);
        if (!covering) {
          throw new ApiError('audit_unavailable', `Entry ${leaf} is not in a signed checkpoint yet. Retry in a few seconds.`, {
            headers: { 'retry-after': String(Math.ceil(deps.config.audit.checkpointMs / 1000) + 1) },
          });
        }
        return {
          object: 'audit.receipt',
          ...about,
          leaf,
          entry,
          entry_canonical: bytes!.toString('utf8'),
          checkpoint: covering,
          inclusion: b64(audit.log.inclusion(leaf, covering.size)),
        };
      }

      const limit = Number(request.query.limit ?? 20);
      if (limit < 1 || limit > 100) {
        throw new ApiError('invalid_request_error', 'limit must be between 1 and 100.', { param: 'limit' });
      }
      const before = request.query.before === undefined ? undefined : Number(request.query.before);
      const page = checkpoints?.list(limit + 1, before) ?? [];
      const shown = page.slice(0, limit);
      return {
        object: 'audit.anchors',
        ...about,
        checkpoints: shown.map((c, i) => withProof(c, page[i + 1] ?? (c.seq > 1 ? checkpoints!.get(c.seq - 1) : undefined))),
        has_more: page.length > limit,
        next_before: page.length > limit ? shown[shown.length - 1]!.seq : null,
      };
    },
  );
}
