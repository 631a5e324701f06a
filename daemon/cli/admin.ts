// `sovereign keys …` and `sovereign projects …`: they open the same store as the daemon (its lmdb, or with
// `store: "postgres"` the database every replica shares), which sees each change on its next read, so they work while
// it runs.
import type { EntryFields, EntryKind } from '../audit/index.js';
import { AuditOutbox, cliActor } from '../audit/outbox.js';
import { loadConfig, type Config } from '../config/index.js';
import { keyCreatedFields, KeyRegistry, type KeyView, type ProjectRecord } from '../keys/index.js';
import { openConfiguredStore } from './store.js';
import { COMMON_HELP, CONFIG_OPTIONS, configFlags, limitFlag, parse, UsageError, type Parsed } from './args.js';
import { printJson, printTable } from './output.js';

export const KEYS_HELP = `Usage: sovereign keys <command> [options]

Commands:
  create --project P [--name N] [--rpm N] [--tpm N] [--plan NAME]
                       create a key; prints its secret once
  list [--project P]   list keys (never secrets)
  rotate ID [--grace SECONDS]
                       new secret, same id; the old one works for SECONDS more (default 0)
  revoke ID            the key stops working at once
  limits ID [--rpm N|default] [--tpm N|default]
                       set or clear the key's own limits (cloud and frontier postures)
  plan ID NAME|default put the key on a plan of the config's 'plans', or back on limits.defaultPlan

${COMMON_HELP}`;

export const PROJECTS_HELP = `Usage: sovereign projects <command> [options]

Commands:
  create NAME          create a project (letters, digits, '.', '_', '-')
  list                 list projects, with the limits their keys share
  limits P [--rpm N|default] [--tpm N|default]
                       set or clear the requests and tokens per minute all of project P's keys
                       share (cloud and frontier postures); 'default' is limits.defaultProjectRpm/Tpm

${COMMON_HELP}`;

/**
 * Records an administrative action for the audit log: the hook a registry change is given, which puts the event in
 * the outbox (daemon/audit/outbox.ts) with the change (see Store.update); the running daemon, or the next one to
 * start, logs it as made by this unix user.
 */
type Audit = <R>(kind: EntryKind, fieldsOf: (result: R) => EntryFields) => (result: R) => void;

async function withRegistry<T>(
  values: Record<string, string | boolean | undefined>,
  work: (registry: KeyRegistry, config: Config, audit: Audit) => T | Promise<T>,
): Promise<T> {
  const { config } = loadConfig(configFlags(values));
  const store = await openConfiguredStore(config);
  try {
    const by = cliActor();
    const outbox = new AuditOutbox(store);
    const audit: Audit = (kind, fieldsOf) => (result) => outbox.put(kind, { by, ...fieldsOf(result) });
    return await work(new KeyRegistry(store), config, audit);
  } finally {
    await store.close();
  }
}

/** A plan must be one the config defines: a key on an unknown plan would silently get the defaults. */
function checkPlan(config: Config, plan: string): void {
  if (!Object.hasOwn(config.plans, plan)) {
    const names = Object.keys(config.plans);
    throw new UsageError(
      `no plan '${plan}' in the config's 'plans'` + (names.length ? ` (plans: ${names.join(', ')})` : ' (it defines none)'),
    );
  }
}

function keyRow(k: KeyView) {
  return {
    id: k.id,
    project: k.projectName,
    status: k.status,
    hint: k.hint,
    rpm: k.rpm,
    tpm: k.tpm,
    plan: k.plan,
    created: k.createdAt,
    rotated: k.rotatedAt,
    grace_until: k.graceUntil,
  };
}

function printSecret(json: boolean, key: KeyView, secret: string, verb: string): void {
  if (json) {
    printJson({ ...key, secret });
    return;
  }
  process.stdout.write(
    `${verb} ${key.id} in project ${key.projectName}.\n\n  ${secret}\n\nThis secret is shown once. Store it now; only its hash is kept.\n`,
  );
}

/** What every `keys` subcommand is called with: its name, the positional arguments after it, and the flags. */
interface KeysCall {
  command: string;
  id: string | undefined;
  rest: string[];
  values: Parsed['values'];
  json: boolean;
}

/** The key id a subcommand acts on (its first argument), required. */
function keyIdArgument({ command, id }: KeysCall): string {
  if (!id) throw new UsageError(`keys ${command} needs a key id (see 'sovereign keys list')`);
  return id;
}

async function createKeyCommand({ id, values, json }: KeysCall): Promise<number> {
  if (typeof values.project !== 'string') throw new UsageError('keys create needs --project P');
  if (id) throw new UsageError(`unexpected argument '${id}'`);
  const rpm = limitFlag('rpm', values.rpm, false) ?? undefined;
  const tpm = limitFlag('tpm', values.tpm, false) ?? undefined;
  const project = values.project;
  const name = typeof values.name === 'string' ? values.name : undefined;
  const plan = typeof values.plan === 'string' ? values.plan : undefined;
  const { key, secret } = await withRegistry(values, (r, config, audit) => {
    if (plan !== undefined) checkPlan(config, plan);
    return r.createKey(
      { project, ...(name ? { name } : {}), ...(rpm ? { rpm } : {}), ...(tpm ? { tpm } : {}), ...(plan ? { plan } : {}) },
      audit('key.created', (created: { key: KeyView }) => keyCreatedFields(created.key)),
    );
  });
  printSecret(json, key, secret, 'Created');
  return 0;
}

async function listKeysCommand({ values, json }: KeysCall): Promise<number> {
  const project = typeof values.project === 'string' ? values.project : undefined;
  const keys = await withRegistry(values, (r) => r.listKeys(project ? { project } : {}));
  if (json) printJson(keys);
  else printTable(keys.map(keyRow), ['id', 'project', 'status', 'hint', 'rpm', 'tpm', 'plan', 'created', 'rotated', 'grace_until']);
  return 0;
}

async function rotateKeyCommand(call: KeysCall): Promise<number> {
  const { values, json } = call;
  const keyId = keyIdArgument(call);
  let grace = 0;
  if (values.grace !== undefined) {
    if (typeof values.grace !== 'string' || !/^\d+$/.test(values.grace)) throw new UsageError(`--grace must be a whole number of seconds`);
    grace = Number(values.grace);
  }
  const { key, secret } = await withRegistry(values, (r, _config, audit) =>
    r.rotateKey(
      keyId,
      grace,
      audit('key.rotated', (rotated: { key: KeyView }) => ({ key: rotated.key.id, project: rotated.key.project, grace_seconds: grace })),
    ),
  );
  printSecret(json, key, secret, grace ? `Rotated (old secret accepted for ${grace}s more)` : 'Rotated (old secret no longer accepted)');
  return 0;
}

async function revokeKeyCommand(call: KeysCall): Promise<number> {
  const keyId = keyIdArgument(call);
  const key = await withRegistry(call.values, (r, _config, audit) =>
    r.revokeKey(
      keyId,
      audit('key.revoked', (revoked: KeyView) => ({ key: revoked.id, project: revoked.project })),
    ),
  );
  if (call.json) printJson(key);
  else process.stdout.write(`Revoked ${key.id}; it no longer authenticates.\n`);
  return 0;
}

async function keyLimitsCommand(call: KeysCall): Promise<number> {
  const { values, json } = call;
  const keyId = keyIdArgument(call);
  const rpm = limitFlag('rpm', values.rpm, true);
  const tpm = limitFlag('tpm', values.tpm, true);
  if (rpm === undefined && tpm === undefined) throw new UsageError('keys limits needs --rpm and/or --tpm');
  const key = await withRegistry(values, (r, _config, audit) =>
    r.setLimits(
      keyId,
      { ...(rpm !== undefined ? { rpm } : {}), ...(tpm !== undefined ? { tpm } : {}) },
      audit('key.limits', (changed: KeyView) => ({ key: changed.id, project: changed.project, rpm: changed.rpm, tpm: changed.tpm })),
    ),
  );
  if (json) printJson(key);
  else process.stdout.write(`${key.id}: rpm ${key.rpm ?? 'default'}, tpm ${key.tpm ?? 'default'}\n`);
  return 0;
}

async function keyPlanCommand(call: KeysCall): Promise<number> {
  const keyId = keyIdArgument(call);
  const [plan] = call.rest;
  if (!plan) throw new UsageError("keys plan needs a plan name, or 'default' (see the config's 'plans')");
  const key = await withRegistry(call.values, (r, config, audit) => {
    if (plan !== 'default') checkPlan(config, plan);
    return r.setPlan(
      keyId,
      plan === 'default' ? null : plan,
      audit('key.plan', (changed: KeyView) => ({ key: changed.id, project: changed.project, plan: changed.plan })),
    );
  });
  if (call.json) printJson(key);
  else process.stdout.write(`${key.id}: plan ${key.plan ?? 'default'}\n`);
  return 0;
}

const KEYS_COMMANDS: Record<string, (call: KeysCall) => Promise<number>> = {
  create: createKeyCommand,
  list: listKeysCommand,
  rotate: rotateKeyCommand,
  revoke: revokeKeyCommand,
  limits: keyLimitsCommand,
  plan: keyPlanCommand,
};

export async function keysCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    ...CONFIG_OPTIONS,
    project: { type: 'string' },
    name: { type: 'string' },
    rpm: { type: 'string' },
    tpm: { type: 'string' },
    grace: { type: 'string' },
    plan: { type: 'string' },
  });
  const [command, id, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${KEYS_HELP}\n`);
    return values.help ? 0 : 2;
  }
  // Only `keys plan ID NAME` takes an argument after the id.
  if (rest.length > (command === 'plan' ? 1 : 0)) throw new UsageError(`unexpected argument '${rest.at(-1)}'`);
  const run = Object.hasOwn(KEYS_COMMANDS, command) ? KEYS_COMMANDS[command] : undefined;
  if (!run) throw new UsageError(`unknown keys command '${command}'`);
  return run({ command, id, rest, values, json: values.json === true });
}

export async function projectsCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, { ...CONFIG_OPTIONS, rpm: { type: 'string' }, tpm: { type: 'string' } });
  const [command, name, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${PROJECTS_HELP}\n`);
    return values.help ? 0 : 2;
  }
  if (rest.length) throw new UsageError(`unexpected argument '${rest[0]}'`);
  if (command !== 'limits' && (values.rpm !== undefined || values.tpm !== undefined)) {
    throw new UsageError(`--rpm and --tpm go with 'projects limits'`);
  }
  const json = values.json === true;
  switch (command) {
    case 'create': {
      if (!name) throw new UsageError('projects create needs a NAME');
      const project = await withRegistry(values, (r, _config, audit) =>
        r.createProject(
          name,
          undefined,
          audit('project.created', (created: ProjectRecord) => ({ project: created.id, name: created.name })),
        ),
      );
      if (json) printJson(project);
      else process.stdout.write(`Created project ${project.name} (${project.id}).\n`);
      return 0;
    }
    case 'list': {
      if (name) throw new UsageError(`unexpected argument '${name}'`);
      const { projects, config } = await withRegistry(values, (r, config) => ({ projects: r.listProjects(), config }));
      if (json) printJson(projects.map(projectView));
      else
        printTable(
          projects.map((p) => projectRow(p, config)),
          ['id', 'name', 'rpm', 'tpm', 'created'],
        );
      return 0;
    }
    case 'limits': {
      if (!name) throw new UsageError("projects limits needs a project (its name or id; see 'sovereign projects list')");
      const rpm = limitFlag('rpm', values.rpm, true);
      const tpm = limitFlag('tpm', values.tpm, true);
      if (rpm === undefined && tpm === undefined) throw new UsageError('projects limits needs --rpm and/or --tpm');
      const { project, config } = await withRegistry(values, async (r, config, audit) => {
        const changed = await r.setProjectLimits(
          name,
          { ...(rpm !== undefined ? { rpm } : {}), ...(tpm !== undefined ? { tpm } : {}) },
          audit('project.limits', (p: ProjectRecord) => ({ project: p.id, rpm: p.rpm ?? null, tpm: p.tpm ?? null })),
        );
        return { project: changed, config };
      });
      const row = projectRow(project, config);
      if (json) printJson(projectView(project));
      else process.stdout.write(`${row.name}: rpm ${row.rpm}, tpm ${row.tpm}, shared by all its keys\n`);
      return 0;
    }
    default:
      throw new UsageError(`unknown projects command '${command}'`);
  }
}

/** A project for --json: its own limits, null where the configured defaults apply (as keys list does). */
function projectView(project: ProjectRecord) {
  return { id: project.id, name: project.name, createdAt: project.createdAt, rpm: project.rpm ?? null, tpm: project.tpm ?? null };
}

/** A project as a table row: the limits its keys share, its own or (marked) the configured defaults. */
function projectRow(project: ProjectRecord, config: Config) {
  const limit = (own: number | undefined, fallback: number) => (own !== undefined ? String(own) : `${fallback} (default)`);
  return {
    id: project.id,
    name: project.name,
    rpm: limit(project.rpm, config.limits.defaultProjectRpm),
    tpm: limit(project.tpm, config.limits.defaultProjectTpm),
    created: project.createdAt,
  };
}
