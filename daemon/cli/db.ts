// `sovereign db …`: the PostgreSQL database replicas share (store: "postgres"). `migrate` brings its schema to this
// build's version, once per upgrade, from any node; replicas never change the schema themselves.
import pg from 'pg';
import { loadConfig, type Config } from '../config/index.js';
import { connectionConfig, migrate, MIGRATIONS, schemaProblem, schemaVersion, SCHEMA_VERSION } from '../store/index.js';
import { COMMON_HELP, CONFIG_OPTIONS, configFlags, parse, UsageError } from './args.js';
import { printJson } from './output.js';

export const DB_HELP = `Usage: sovereign db <command> [options]

Commands:
  migrate              apply the schema migrations the database lacks, in order (run once per upgrade, from any node)
  status               the database's schema version against this build's, and whether a replica can start on it

The database is the config's 'postgres' (store: postgres, cloud and frontier postures).

${COMMON_HELP}`;

function connect(config: Config): pg.Pool {
  if (config.store !== 'postgres' || !config.postgres) {
    throw new UsageError("the config's 'store' is not postgres: there is no shared database (see docs/scale-out.md)");
  }
  // Migrations may take longer than a call's statement.
  const pool = new pg.Pool({ ...connectionConfig(config.postgres, 'sovereign-db'), query_timeout: undefined, max: 1 });
  pool.on('error', () => {});
  return pool;
}

export async function dbCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, { ...CONFIG_OPTIONS });
  const [command, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${DB_HELP}\n`);
    return values.help ? 0 : 2;
  }
  if (rest.length) throw new UsageError(`unexpected argument '${rest[0]}'`);
  if (command !== 'migrate' && command !== 'status') throw new UsageError(`unknown db command '${command}'`);
  const json = values.json === true;
  const { config } = loadConfig(configFlags(values));
  const pool = connect(config);
  try {
    const before = await schemaVersion(pool).catch((err: unknown) => {
      throw new Error(`cannot reach PostgreSQL at ${config.postgres!.url}: ${(err as Error).message}`);
    });
    if (command === 'status') {
      const problem = schemaProblem(before);
      if (json) printJson({ schema: before, build: SCHEMA_VERSION, ready: !problem, problem });
      else process.stdout.write(problem ? `schema ${before}, this build ${SCHEMA_VERSION}: ${problem}\n` : `schema ${before}: current\n`);
      return problem ? 1 : 0;
    }
    const progress = json ? () => {} : (line: string) => process.stdout.write(`${line}\n`);
    const applied = await migrate(pool, progress);
    if (json) printJson({ from: before, to: SCHEMA_VERSION, applied });
    else if (applied.length === 0) process.stdout.write(`schema ${before}: already current\n`);
    else process.stdout.write(`schema ${before} -> ${SCHEMA_VERSION}: ${applied.length} of ${MIGRATIONS.length} migrations applied\n`);
    return 0;
  } finally {
    await pool.end();
  }
}
