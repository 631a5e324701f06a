// GET /v1/audit/anchors: the signed checkpoints (newest first, each with its consistency proof from the one signed
// before it) and the key that signs them, and in a cluster (`store: "postgres"`) every replica's log as it last
// published it (`logs`); with ?leaf=N, one call's receipt: its entry, the checkpoint that covers it and the inclusion
// proof. Any key may read checkpoints; an entry only by a key of the project that made the call.
import type { FastifyInstance } from 'fastify';
import type { Config } from '../../config/index.js';
import type { AuditCheckpoint, AuditService } from '../../audit/index.js';
import { describeLog, proofText, receiptOf } from '../../audit/receipts.js';
import { ApiError } from '../../errors/index.js';

/** What the audit routes need: the log they read receipts and checkpoints from. */
export interface AuditRouteDeps {
  config: Config;
  audit: AuditService;
}

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

export function registerAuditRoutes(v1: FastifyInstance, deps: AuditRouteDeps): void {
  v1.get<{ Querystring: AnchorsQuery }>(
    '/audit/anchors',
    { schema: { querystring: anchorsQuery }, config: { declaration: { auth: true } } },
    async (request) => {
      const audit = deps.audit;
      if (!audit) throw new ApiError('audit_unavailable', 'This server keeps no audit log.');
      const checkpoints = audit.checkpoints;
      const about = describeLog(audit);
      const withProof = (c: AuditCheckpoint, previous: AuditCheckpoint | undefined) => ({
        ...c,
        consistency: previous
          ? { from_seq: previous.seq, from_size: previous.size, proof: proofText(audit.log.consistency(previous.size, c.size)) }
          : null,
      });

      const leaf = request.query.leaf === undefined ? undefined : Number(request.query.leaf);
      if (leaf !== undefined) {
        const projectId = request.call.principal!.projectId;
        return receiptOf(audit, leaf, (entry) => entry.project === projectId, deps.config.audit.checkpointMs);
      }

      const limit = Number(request.query.limit ?? 20);
      if (limit < 1 || limit > 100) {
        throw new ApiError('invalid_request_error', 'limit must be between 1 and 100.', { param: 'limit' });
      }
      const before = request.query.before === undefined ? undefined : Number(request.query.before);
      const page = checkpoints?.list(limit + 1, before) ?? [];
      const shown = page.slice(0, limit);
      const logs = audit.logs();
      return {
        object: 'audit.anchors',
        ...about,
        checkpoints: shown.map((c, i) => withProof(c, page[i + 1] ?? (c.seq > 1 ? checkpoints!.get(c.seq - 1) : undefined))),
        has_more: page.length > limit,
        next_before: page.length > limit ? shown[shown.length - 1]!.seq : null,
        ...(logs ? { logs } : {}),
      };
    },
  );
}
