// Projects: those this account manages, and a new one (a member's count toward its cap and its in-flight share).
import type { FastifyPluginAsync } from 'fastify';
import { projectCap } from '../accounts/index.js';
import type { ProjectRecord } from '../keys/index.js';
import { asUser, type DashboardContext } from './context.js';
import { fromAccounts, manages, signedIn } from './guards.js';

export function projectsApi(ctx: DashboardContext): FastifyPluginAsync {
  const { config, accounts, keys } = ctx.deps;
  return async function projects(api) {
    api.get('/projects', async (request) => {
      const { user } = signedIn(request);
      return { data: keys.listProjects().filter((p) => manages(user, p.id)) };
    });

    api.post<{ Body: { name: string } }>(
      '/projects',
      {
        schema: {
          body: {
            type: 'object',
            required: ['name'],
            additionalProperties: false,
            properties: { name: { type: 'string', maxLength: 64 } },
          },
        },
      },
      async (request, reply) => {
        const { user } = signedIn(request);
        const max = config.limits.maxProjectsPerAccount;
        if (user.role !== 'admin' && user.projects.length >= max) fromAccounts(projectCap(max));
        ctx.trail.writable();
        let created: ProjectRecord;
        try {
          // A member's projects share the account's in-flight places; an administrator's are not the account's.
          const project = await keys.createProject(request.body.name, user.role === 'admin' ? undefined : user.id);
          if (user.role !== 'admin') {
            try {
              await accounts.addProject(user.id, project.id, max);
            } catch (err) {
              // Another project of the account was made meanwhile and reached the cap: this one must not stay.
              await keys.removeProject(project.id);
              throw err;
            }
          }
          created = project;
        } catch (err) {
          fromAccounts(err);
        }
        await ctx.trail.record(asUser(user), 'project.created', { project: created.id, name: created.name });
        return reply.code(201).send(created);
      },
    );
  };
}
