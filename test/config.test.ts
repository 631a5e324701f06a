// Configuration: one JSON file validated with ajv, environment overrides, flags; every key documented.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { configSchema, ConfigError, defaultDataDir, ENV_OVERRIDES, loadConfig } from '../daemon/config/index.js';
import { cli, ROOT, tempDir } from './helpers/daemon.js';

const dir = tempDir(t);
const write = (name: string, value: unknown) => {
  const path = join(dir, name);
  writeFileSync(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
};

function problemsOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

t.test('defaults: device posture on 127.0.0.1:8443 over HTTP', async (t) => {
  const { config } = loadConfig({ dataDir: dir }, {});
  t.match(config, { posture: 'device', listen: { port: 8443 }, region: 'local' });
  t.equal(config.tls, undefined);
});

t.test("default data directory: systemd's, else the user's own, root's too (never /var/lib outside systemd)", async (t) => {
  // The suite runs as root on CI and in the development container: the case that used to write /var/lib/sovereign.
  t.equal(defaultDataDir({ HOME: '/home/ops' }), '/home/ops/.local/share/sovereign');
  t.equal(defaultDataDir({ HOME: '/root' }), '/root/.local/share/sovereign');
  t.equal(defaultDataDir({ HOME: '/root', XDG_DATA_HOME: '/srv/data' }), '/srv/data/sovereign');
  t.equal(defaultDataDir({ HOME: '/root', XDG_DATA_HOME: 'relative' }), '/root/.local/share/sovereign', 'a relative XDG path is ignored');
  t.equal(defaultDataDir({ HOME: '/root', STATE_DIRECTORY: '/var/lib/sovereign:/var/lib/other' }), '/var/lib/sovereign');
  // The effective value an operator sees, through the CLI in this process's own user (root here).
  const home = tempDir(t);
  const r = cli(['config', 'check', '--json'], { HOME: home, XDG_DATA_HOME: '', STATE_DIRECTORY: '' });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.json.config.dataDir, join(home, '.local', 'share', 'sovereign'));
});

t.test('unknown keys are rejected by name, nested ones too', async (t) => {
  const file = write('unknown.json', { posture: 'device', listen: { hots: '127.0.0.1' }, colour: 'blue' });
  const problems = problemsOf(() => loadConfig({ config: file }, {}));
  t.ok(
    problems.some((p) => p.includes("unknown key 'listen.hots'")),
    problems.join('; '),
  );
  t.ok(problems.some((p) => p.includes("unknown key 'colour'")));
  const r = cli(['config', 'check', '--config', file]);
  t.equal(r.code, 1);
  t.match(r.stderr, /unknown key 'listen\.hots'/);
  t.match(r.stderr, /unknown key 'colour'/);
});

t.test('wrong types and values name the key', async (t) => {
  const file = write('types.json', {
    posture: 'mainframe',
    listen: { port: 'eighty' },
    limits: { maxInFlight: 0 },
    documents: { pdf: { memoryMb: 128 } },
  });
  const problems = problemsOf(() => loadConfig({ config: file }, {})).join('\n');
  t.match(problems, /'documents\.pdf\.memoryMb' must be >= 256/, 'a PDF budget too small to read any PDF');
  t.match(problems, /'posture' must be one of device, appliance, cloud, frontier/);
  t.match(problems, /'listen\.port' must be integer/);
  t.match(problems, /'limits\.maxInFlight' must be >= 1/);
  const json = cli(['config', 'check', '--config', file, '--json']);
  t.equal(json.code, 1);
  t.match(json.json.error.problems.join('\n'), /listen\.port/);
});

t.test('postgres.url names no password: not before the host, nor in its options', async (t) => {
  const problems = (url: string) =>
    problemsOf(() => loadConfig({ config: write('pg.json', { store: 'postgres', postgres: { url } }) }, {}))
      .filter((p) => p.includes('postgres.url'))
      .join('\n');
  for (const url of [
    'postgres://sovereign@10.0.0.7:5432/sovereign',
    'postgresql://sovereign@db.example.org/sovereign?sslmode=verify-full&sslrootcert=/etc/ca.pem',
  ]) {
    t.equal(problems(url), '', `${url} is accepted`);
  }
  for (const url of [
    'postgres://sovereign:hunter2@10.0.0.7/sovereign',
    'postgres://sovereign@10.0.0.7/sovereign?password=hunter2',
    'postgres://sovereign@10.0.0.7/sovereign?sslmode=require&password=hunter2',
    'postgres://sovereign@10.0.0.7/sovereign?sslpassword=hunter2',
  ]) {
    t.match(problems(url), /postgres\.url/, `${url} is refused`);
  }
});

t.test('a file that is not JSON says so', async (t) => {
  const file = write('broken.json', '{ "posture": ');
  const r = cli(['config', 'check', '--config', file]);
  t.equal(r.code, 1);
  t.match(r.stderr, /not valid JSON/);
  t.match(cli(['config', 'check', '--config', join(dir, 'missing.json')]).stderr, /cannot read the config file/);
});

t.test('precedence: file < environment < flags; relative paths follow the file', async (t) => {
  const file = write('layered.json', { region: 'from-file', listen: { port: 1000 }, dataDir: 'state', audit: { journalDir: 'journal' } });
  t.equal(loadConfig({ config: file }, {}).config.region, 'from-file');
  t.equal(loadConfig({ config: file }, {}).config.dataDir, join(dir, 'state'));
  t.equal(loadConfig({ config: file }, {}).config.audit.journalDir, join(dir, 'journal'));
  t.equal(loadConfig({}, {}).config.audit.journalDir, undefined, 'the data directory unless set');
  const env = { SOVEREIGN_REGION: 'from-env', SOVEREIGN_PORT: '2000' };
  t.match(loadConfig({ config: file }, env).config, { region: 'from-env', listen: { port: 2000 } });
  t.match(loadConfig({ config: file, region: 'from-flag', port: '3000' }, env).config, { region: 'from-flag', listen: { port: 3000 } });
  t.match(problemsOf(() => loadConfig({}, { SOVEREIGN_PORT: 'abc' })).join(), /SOVEREIGN_PORT must be a whole number/);
  const r = cli(['config', 'check', '--config', file, '--region', 'sa-riyadh-1', '--json']);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.json.config.region, 'sa-riyadh-1');
});

t.test('posture rules: HTTPS postures need a certificate and an address; device stays on loopback', async (t) => {
  t.match(
    problemsOf(() => loadConfig({ posture: 'appliance', host: '10.0.0.5' }, {})).join(),
    /serves HTTPS only: set 'tls\.cert' and 'tls\.key'/,
  );
  t.match(problemsOf(() => loadConfig({ posture: 'cloud' }, {})).join(), /'listen\.host' is required/);
  t.match(problemsOf(() => loadConfig({ host: '0.0.0.0' }, {})).join(), /device posture listens on loopback only/);
  t.same(
    problemsOf(() => loadConfig({ posture: 'appliance', host: '10.0.0.5' }, { SOVEREIGN_TLS_CERT: '/c', SOVEREIGN_TLS_KEY: '/k' })),
    [],
  );
  const r = cli(['config', 'check', '--posture', 'appliance', '--host', '10.0.0.5'], {
    SOVEREIGN_TLS_CERT: '/nonexistent/c.pem',
    SOVEREIGN_TLS_KEY: '/nonexistent/k.pem',
  });
  t.equal(r.code, 1, 'config check verifies the certificate files exist');
  t.match(r.stdout, /'tls\.cert' names '\/nonexistent\/c\.pem', which does not exist/);
});

t.test('docs/config.md documents every key and every environment variable', async (t) => {
  const doc = readFileSync(join(ROOT, 'docs', 'config.md'), 'utf8');
  const keys: string[] = [];
  type Schema = { properties?: Record<string, Schema>; items?: Schema };
  const walk = (schema: Schema, prefix: string) => {
    for (const [name, sub] of Object.entries<Schema>(schema.properties ?? {})) {
      if (name === '$schema') continue;
      keys.push(prefix + name);
      walk(sub, `${prefix}${name}.`);
      // Keys of an array's items are written `name[].key`.
      if (sub.items) walk(sub.items, `${prefix}${name}[].`);
    }
  };
  walk(configSchema as unknown as Schema, '');
  t.ok(keys.length > 15);
  for (const key of keys) t.ok(doc.includes(`\`${key}\``), `docs/config.md mentions \`${key}\``);
  for (const { env } of ENV_OVERRIDES) t.ok(doc.includes(env), `docs/config.md mentions ${env}`);
});
