// The chat app's side of the dashboard: its key, bound to this session and revoked when it ends, and the scrubbing
// preview (the user's messages as the model receives them).
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { ApiError } from '../errors/index.js';
import { keyCreatedFields, type KeyView } from '../keys/index.js';
import { OFFLOAD_FROM, SCRUB_BODY, ScrubSession, scrubOffLoop } from '../scrub/index.js';
import { asUser, type DashboardContext } from './context.js';
import { fromAccounts, keyCap, projectFor, signedIn } from './guards.js';

export function chatApi(ctx: DashboardContext): FastifyPluginAsync {
  return async function chat(api) {
    chatKeyRoute(api, ctx);

    api.post<{ Body: { texts: string[] } }>(
      '/scrub',
      {
        schema: {
          body: {
            type: 'object',
            required: ['texts'],
            additionalProperties: false,
            properties: { texts: { type: 'array', maxItems: 256, items: { type: 'string', maxLength: 100_000 } } },
          },
        },
      },
      async (request) => {
        signedIn(request);
        // As a /v1 call's body would be: a large one off the event loop (daemon/scrub/offload.ts). `request.call` is
        // the HTTP layer's (daemon/http/context.ts), whose JSON body parser counts every request's bytes.
        if (request.call.bodyBytes >= OFFLOAD_FROM) {
          const { body, session } = await scrubOffLoop('preview', request.body);
          return { texts: (body as { texts: string[] }).texts, redactions: session.counts() };
        }
        const session = new ScrubSession();
        SCRUB_BODY.preview(request.body, session);
        return { texts: request.body.texts, redactions: session.counts() };
      },
    );
  };
}

/**
 * The chat app's key. Asking again replaces its secret (only the page that asked holds it, in memory); asking for
 * another project revokes the old key and makes a new one. It MUST NOT outlive its session.
 */
function chatKeyRoute(api: FastifyInstance, ctx: DashboardContext): void {
  const { config, accounts, keys } = ctx.deps;
  api.post<{ Body: { project?: string } }>(
    '/chat-key',
    { schema: { body: { type: 'object', additionalProperties: false, properties: { project: { type: 'string', maxLength: 80 } } } } },
    async (request) => {
      const signed = signedIn(request);
      const { user, session } = signed;
      // An administrator manages every tenant's projects: the chat app must be told which one to bill, never guess.
      const asked = request.body?.project ?? user.projects[0];
      if (!asked) {
        throw new ApiError(
          'invalid_request_error',
          user.role === 'admin'
            ? 'Choose the project the chat app calls the API for.'
            : 'Create a project first: the chat app calls the API with a key of one of your projects.',
          { param: 'project' },
        );
      }
      const project = projectFor(keys, user, asked);
      ctx.trail.writable();
      if (session.chatKeyId) {
        let current: KeyView | null = null;
        try {
          current = keys.getKey(session.chatKeyId);
        } catch {
          // Already removed: a new one below.
        }
        if (current?.status === 'active' && current.project === project) {
          const rotated = await keys.rotateKey(current.id);
          await ctx.trail.record(asUser(user), 'key.rotated', { key: current.id, project, grace_seconds: 0, chat_app: true });
          return { secret: rotated.secret };
        }
        if (current?.status === 'active') {
          await keys.revokeKey(current.id);
          await ctx.trail.record(asUser(user), 'key.revoked', { key: current.id, project: current.project, chat_app: true });
        }
      }
      // The chat app's keys count among the project's: sessions are many, and each would bring one more.
      let created: { key: KeyView; secret: string };
      try {
        created = await keys.createKey({ project, name: `chat app (${user.email})`, ...keyCap(config, user) });
      } catch (err) {
        fromAccounts(err);
      }
      await ctx.trail.record(asUser(user), 'key.created', keyCreatedFields(created.key, { chat_app: true }));
      if (!(await accounts.setChatKey(signed.token, created.key.id))) {
        // The session ended while the key was made: it must not outlive it.
        await keys.revokeKey(created.key.id);
        await ctx.trail.record(asUser(user), 'key.revoked', { key: created.key.id, project, chat_app: true });
        throw new ApiError('not_signed_in', 'Sign in to the dashboard first (your session may have expired).');
      }
      return { secret: created.secret };
    },
  );
}
