// `sovereign config check`: validates the effective configuration (file, environment, flags) without serving.
import { existsSync } from 'node:fs';
import { loadConfig, manifestPath, modelsDir } from '../config/index.js';
import { COMMON_HELP, configFlags, parse, SERVE_OPTIONS, UsageError } from './args.js';
import { printJson } from './output.js';

export const CONFIG_HELP = `Usage: sovereign config check [options]

Validates the configuration that 'sovereign serve' would use (file, then environment, then flags) and prints
the effective values. Exits 1 and names every bad key when it is invalid.

Options: the same as 'sovereign serve' (--posture, --host, --port, --region, ...).
${COMMON_HELP}`;

export async function configCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, SERVE_OPTIONS);
  const [command, ...rest] = positionals;
  if (values.help || !command) {
    process.stdout.write(`${CONFIG_HELP}\n`);
    return values.help ? 0 : 2;
  }
  if (command !== 'check') throw new UsageError(`unknown config command '${command}'`);
  if (rest.length) throw new UsageError(`unexpected argument '${rest[0]}'`);
  const { config, file } = loadConfig(configFlags(values));
  const problems: string[] = [];
  const files: Array<[string, string | undefined]> = [
    ['tls.cert', config.tls?.cert],
    ['tls.key', config.tls?.key],
    ['limits.redis.passwordFile', config.limits.redis?.passwordFile],
    ...config.upstreams.map((u, i): [string, string | undefined] => [`upstreams[${i}].apiKeyFile`, u.apiKeyFile]),
  ];
  for (const [key, path] of files) {
    if (path && !existsSync(path)) problems.push(`'${key}' names '${path}', which does not exist`);
  }
  const effective = { ...config, modelsDir: modelsDir(config), manifest: manifestPath(config) };
  if (values.json) printJson({ valid: problems.length === 0, file: file ?? null, problems, config: effective });
  else {
    process.stdout.write(
      problems.length
        ? `invalid configuration (${file ?? 'defaults'}):\n${problems.map((p) => `  - ${p}`).join('\n')}\n`
        : `configuration is valid (${file ?? 'defaults, environment and flags'})\n`,
    );
    process.stdout.write(`${JSON.stringify(effective, null, 2)}\n`);
  }
  return problems.length ? 1 : 0;
}
