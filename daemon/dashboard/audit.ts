// The audit log as the dashboard shows it: the signer and newest checkpoints, one call's receipt by its request id
// (for the projects this account manages), and for administrators the whole log: its export, its entries and the
// offline verifier.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { ENTRY_KINDS, isEntryKind } from '../audit/index.js';
import { exportAnchors } from '../audit/export.js';
import { entriesOfKind } from '../audit/kinds.js';
import { describeLog, findByRequestId, receiptOf } from '../audit/receipts.js';
import { ApiError } from '../errors/index.js';
import { Gcra } from '../limits/index.js';
import type { DashboardContext } from './context.js';
import { adminOnly, admit, manages, signedIn } from './guards.js';

/** The offline verifier, shipped beside dist/ (tools/verify-anchors.mjs). */
const VERIFIER = join(import.meta.dirname, '..', '..', 'tools', 'verify-anchors.mjs');
/** Audit lookups by request id per minute and account (each is one index read; the limit keeps ids from being probed). */
const LOOKUPS_PER_MINUTE = 10;
/** Entries the audit page's kind filter reads back over, newest first, per page. */
const ENTRIES_WITHIN = 1_000_000;

export function auditApi(ctx: DashboardContext): FastifyPluginAsync {
  const { audit, store } = ctx.deps;
  return async function auditRoutes(api) {
    // The log's signer and newest checkpoints.
    api.get('/audit', async (request) => {
      const { user } = signedIn(request);
      return {
        ...describeLog(audit),
        checkpoints: (audit.checkpoints?.list(10) ?? []).map(({ seq, size, time, signer, key_id }) => ({
          seq,
          size,
          time,
          signer,
          key_id,
        })),
        canExport: user.role === 'admin',
      };
    });

    // The export `sovereign audit export` writes, for the page's verifier and for download (administrators).
    api.get('/audit/anchors.json', async (request, reply) => {
      adminOnly(signedIn(request).user);
      reply.header('content-disposition', 'attachment; filename="anchors.json"');
      return exportAnchors(store, audit.log, audit.originName).anchors;
    });

    entriesRoutes(api, ctx);
    lookupRoute(api, ctx);

    // The offline verifier, to copy to an air-gapped machine.
    api.get('/audit/verify-anchors.mjs', async (request, reply) => {
      signedIn(request);
      return reply
        .type('text/javascript; charset=utf-8')
        .header('content-disposition', 'attachment; filename="verify-anchors.mjs"')
        .send(readFileSync(VERIFIER));
    });
  };
}

/** The log's entries, for administrators: the whole log as JSON lines, or the newest of one kind or all. */
function entriesRoutes(api: FastifyInstance, ctx: DashboardContext): void {
  const { audit } = ctx.deps;
  api.get<{ Querystring: { size?: string } }>('/audit/entries.jsonl', async (request, reply) => {
    adminOnly(signedIn(request).user);
    const log = audit.log;
    const asked = Number(request.query.size ?? log.size);
    if (!Number.isSafeInteger(asked) || asked < 0 || asked > log.size) {
      throw new ApiError('invalid_request_error', `size must be a whole number from 0 to ${log.size}.`, { param: 'size' });
    }
    reply.header('content-disposition', 'attachment; filename="entries.jsonl"').type('application/x-ndjson; charset=utf-8');
    return reply.send(
      Readable.from(
        (function* () {
          for (let i = 0; i < asked; i++) yield `${log.entry(i)!.toString('utf8')}\n`;
        })(),
      ),
    );
  });

  // The log holds every project's calls and every administrative action. Searches back over at most ENTRIES_WITHIN
  // entries from `before`.
  api.get<{ Querystring: { kind?: string; before?: string; limit?: string } }>('/audit/entries', async (request) => {
    adminOnly(signedIn(request).user);
    const log = audit.log;
    const { kind } = request.query;
    if (kind !== undefined && kind !== '' && !isEntryKind(kind)) {
      throw new ApiError('invalid_request_error', `No entry kind '${kind}'; the kinds are ${Object.keys(ENTRY_KINDS).join(', ')}.`, {
        param: 'kind',
      });
    }
    const limit = Number(request.query.limit ?? 50);
    const before = Number(request.query.before ?? log.readable);
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 200) {
      throw new ApiError('invalid_request_error', 'limit must be a whole number from 1 to 200.', { param: 'limit' });
    }
    if (!Number.isSafeInteger(before) || before < 0) {
      throw new ApiError('invalid_request_error', 'before must be a leaf index.', { param: 'before' });
    }
    const found = await entriesOfKind(audit, kind || null, Math.min(before, log.readable), limit, ENTRIES_WITHIN);
    return { kinds: Object.keys(ENTRY_KINDS), ...found };
  });
}

/** One call's receipt, found by its X-Request-Id; only for calls of the projects this account manages. */
function lookupRoute(api: FastifyInstance, ctx: DashboardContext): void {
  const { audit, config } = ctx.deps;
  const lookups = new Gcra();
  api.get<{ Querystring: { request_id?: string } }>('/audit/lookup', async (request) => {
    const { user } = signedIn(request);
    const id = request.query.request_id?.trim() ?? '';
    if (!/^req_[0-9a-f]{32}$/.test(id)) {
      throw new ApiError('invalid_request_error', 'Give the request id from the X-Request-Id header, such as req_0123…', {
        param: 'request_id',
      });
    }
    admit(lookups, user.id, LOOKUPS_PER_MINUTE, 'Too many lookups.');
    const leaf = findByRequestId(audit, id);
    const visible = (entry: { project?: string }) => typeof entry.project === 'string' && manages(user, entry.project);
    if (leaf === null) throw new ApiError('not_found', `No audit entry for ${id} in your projects.`, { param: 'request_id' });
    return receiptOf(audit, leaf, visible, config.audit.checkpointMs);
  });
}
