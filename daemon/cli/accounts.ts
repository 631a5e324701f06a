// `sovereign admin …`: the dashboard's operator accounts on device and appliance postures, which have no
// self-serve sign-up. There is never a default password: the operator types one (or pipes it with
// --password-stdin), and only its scrypt hash is stored.
import { createInterface } from 'node:readline';
import { Accounts, AccountsError, MIN_PASSWORD_LENGTH, view, type Role } from '../accounts/index.js';
import { AuditOutbox, cliActor } from '../audit/outbox.js';
import { loadConfig, type Config } from '../config/index.js';
import { openConfiguredStore } from './store.js';
import { COMMON_HELP, CONFIG_OPTIONS, configFlags, parse, UsageError } from './args.js';
import { printJson, printTable } from './output.js';

export const ADMIN_HELP = `Usage: sovereign admin <command> [options]

Commands:
  create --email E [--password-stdin]
                       create an administrator of the dashboard (every project); asks for the
                       password (at least ${MIN_PASSWORD_LENGTH} characters) unless it comes on stdin
  password --email E [--password-stdin]
                       set the account's password (asked for unless it comes on stdin)
  role --email E admin|member
                       make the account an administrator (every project) or a member (its own)
  list                 list the dashboard's accounts (never passwords)

Each change is recorded in the audit log as made by this unix user.

${COMMON_HELP}`;

async function readPassword(fromStdin: boolean): Promise<string> {
  if (fromStdin || !process.stdin.isTTY) {
    let text = '';
    for await (const chunk of process.stdin) text += String(chunk);
    return text.replace(/\r?\n$/, '');
  }
  // Typed at a terminal: not echoed.
  const ask = (prompt: string) =>
    new Promise<string>((resolve) => {
      const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
      const output = rl as unknown as { _writeToOutput: (s: string) => void };
      process.stderr.write(prompt);
      output._writeToOutput = () => {};
      rl.question('', (answer) => {
        rl.close();
        process.stderr.write('\n');
        resolve(answer);
      });
    });
  const first = await ask('Password: ');
  if ((await ask('Password again: ')) !== first) throw new UsageError('the two passwords differ');
  return first;
}

/** Runs `work` on the data directory's accounts and audit outbox; an AccountsError is a usage error. */
async function withAccounts<T>(config: Config, work: (accounts: Accounts, outbox: AuditOutbox) => Promise<T>): Promise<T> {
  const store = await openConfiguredStore(config);
  try {
    return await work(new Accounts(store), new AuditOutbox(store));
  } catch (err) {
    if (err instanceof AccountsError) throw new UsageError(err.message.replace(/\.$/, '').replace(/^./, (c) => c.toLowerCase()));
    throw err;
  } finally {
    await store.close();
  }
}

export async function adminCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, { ...CONFIG_OPTIONS, email: { type: 'string' }, 'password-stdin': { type: 'boolean' } });
  const [command, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${ADMIN_HELP}\n`);
    return values.help ? 0 : 2;
  }
  if (rest.length > (command === 'role' ? 1 : 0)) throw new UsageError(`unexpected argument '${rest.at(-1)}'`);
  const json = values.json === true;
  const { config } = loadConfig(configFlags(values));
  if (command === 'create') {
    const email = values.email;
    if (typeof email !== 'string') throw new UsageError('admin create needs --email');
    const password = await readPassword(values['password-stdin'] === true);
    return withAccounts(config, async (accounts, outbox) => {
      const user = await accounts.createUser({ email, password, role: 'admin', projects: [] }, (u) =>
        outbox.put('account.created', { by: cliActor(), account: u.id, role: u.role, projects: u.projects }),
      );
      if (json) printJson(view(user));
      else process.stdout.write(`Created administrator ${user.email} (${user.id}). Sign in to the dashboard at /dashboard/.\n`);
      return 0;
    });
  }
  if (command === 'password' || command === 'role') {
    const email = values.email;
    if (typeof email !== 'string') throw new UsageError(`admin ${command} needs --email`);
    const role = rest[0];
    if (command === 'role' && role !== 'admin' && role !== 'member') throw new UsageError("admin role needs 'admin' or 'member'");
    const password = command === 'password' ? await readPassword(values['password-stdin'] === true) : '';
    return withAccounts(config, async (accounts, outbox) => {
      const found = accounts.findByEmail(email);
      if (!found) throw new UsageError(`no account '${email}' (see 'sovereign admin list')`);
      const user =
        command === 'password'
          ? await accounts.setPassword(found.id, password, (u) => outbox.put('account.password', { by: cliActor(), account: u.id }))
          : await accounts.setRole(found.id, role as Role, (u) =>
              outbox.put('account.role', { by: cliActor(), account: u.id, role: u.role, was: found.role }),
            );
      if (json) printJson(view(user));
      else process.stdout.write(command === 'password' ? `Password of ${user.email} changed.\n` : `${user.email} is now ${user.role}.\n`);
      return 0;
    });
  }
  if (command === 'list') {
    const store = await openConfiguredStore(config);
    try {
      const users = new Accounts(store).listUsers().map(view);
      if (json) printJson(users);
      else
        printTable(
          users.map((u) => ({ id: u.id, email: u.email, role: u.role, created: u.createdAt })),
          ['id', 'email', 'role', 'created'],
        );
      return 0;
    } finally {
      await store.close();
    }
  }
  throw new UsageError(`unknown admin command '${command}'`);
}
