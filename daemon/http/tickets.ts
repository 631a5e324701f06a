// A call's place in its model's scheduler (engines/slots.ts): the project it counts for, the project's weight, and the
// service tier it runs at (OpenAI's `service_tier`). What a call waited for its slot is said in a response header.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isMetered, type Config } from '../config/index.js';
import type { CallTicket, ServiceTier } from '../engines/index.js';
import type { KeyRegistry } from '../keys/index.js';

export interface TicketDeps {
  config: Config;
  keys: KeyRegistry;
}

/** The header that says how long a call waited for its model's slot, in milliseconds (only when it waited). */
export const QUEUE_WAIT_HEADER = 'x-queue-wait-ms';

/**
 * The call's ticket. `asked` is the request's `service_tier`: `auto` and `default` are `default`; `flex` is taken as
 * asked; `priority` is taken on the sealed postures, and on the metered ones only for a key whose plan allows it
 * (`plans.NAME.priority`): any other key is served at `default`, and its answer says so.
 */
export function ticketFor(deps: TicketDeps, request: FastifyRequest, asked?: string | null): CallTicket {
  const { config } = deps;
  const principal = request.call.principal!;
  const plan = isMetered(config.posture) ? config.plans[principal.plan ?? config.limits.defaultPlan ?? ''] : undefined;
  let tier: ServiceTier = 'default';
  if (asked === 'flex') tier = 'flex';
  else if (asked === 'priority' && (!isMetered(config.posture) || plan?.priority === true)) tier = 'priority';
  return { project: principal.projectId, weight: weightOf(deps, principal.projectId) ?? plan?.weight ?? 1, tier };
}

/** The project's configured weight, by its id or its name. */
function weightOf(deps: TicketDeps, projectId: string): number | undefined {
  const weights = deps.config.scheduling.projectWeights;
  if (Object.hasOwn(weights, projectId)) return weights[projectId];
  // By name only when some weight is configured: most deployments leave every project at 1.
  if (Object.keys(weights).length === 0) return undefined;
  const name = deps.keys.findProject(projectId)?.name;
  return name !== undefined && Object.hasOwn(weights, name) ? weights[name] : undefined;
}

/** Says how long the call waited for its slot, when it waited. */
export function noteWait(reply: FastifyReply, ticket: CallTicket): void {
  if (ticket.waitedMs) reply.header(QUEUE_WAIT_HEADER, String(ticket.waitedMs));
}
