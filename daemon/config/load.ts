import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { isIP } from 'node:net';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ErrorObject } from 'ajv';
import { addressKind } from '../net/index.js';
import { configSchema, POSTURES, type Config, type Posture } from './schema.js';

/** Everything wrong with a configuration, each line naming the key it is about. */
export class ConfigError extends Error {
  constructor(
    readonly problems: string[],
    readonly source: string,
  ) {
    super(`invalid configuration (${source}):\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Values given on the command line; they win over the environment, which wins over the file. */
export interface ConfigFlags {
  config?: string;
  posture?: string;
  host?: string;
  port?: string;
  region?: string;
  dataDir?: string;
  modelsDir?: string;
  manifest?: string;
}

export interface LoadedConfig {
  config: Config;
  /** The file that was read, if any. */
  file: string | undefined;
}

const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Environment variables and the config key each one overrides. */
export const ENV_OVERRIDES: ReadonlyArray<{ env: string; key: string; type: 'string' | 'integer' | 'boolean' }> = [
  { env: 'SOVEREIGN_POSTURE', key: 'posture', type: 'string' },
  { env: 'SOVEREIGN_REGION', key: 'region', type: 'string' },
  { env: 'SOVEREIGN_HOST', key: 'listen.host', type: 'string' },
  { env: 'SOVEREIGN_PORT', key: 'listen.port', type: 'integer' },
  { env: 'SOVEREIGN_TLS_CERT', key: 'tls.cert', type: 'string' },
  { env: 'SOVEREIGN_TLS_KEY', key: 'tls.key', type: 'string' },
  { env: 'SOVEREIGN_DATA_DIR', key: 'dataDir', type: 'string' },
  { env: 'SOVEREIGN_MODELS_DIR', key: 'modelsDir', type: 'string' },
  { env: 'SOVEREIGN_MANIFEST', key: 'manifest', type: 'string' },
  { env: 'SOVEREIGN_LOG_LEVEL', key: 'log.level', type: 'string' },
  { env: 'SOVEREIGN_MODELS_THREADS', key: 'models.threads', type: 'integer' },
  { env: 'SOVEREIGN_SCRUB_OUTPUT', key: 'scrub.output', type: 'boolean' },
  { env: 'SOVEREIGN_AUDIT_SIGNER', key: 'audit.signer', type: 'string' },
  { env: 'SOVEREIGN_AUDIT_TCTI', key: 'audit.tcti', type: 'string' },
  { env: 'SOVEREIGN_AUDIT_JOURNAL_DIR', key: 'audit.journalDir', type: 'string' },
  { env: 'SOVEREIGN_METRICS_PORT', key: 'metrics.listen.port', type: 'integer' },
  { env: 'SOVEREIGN_PROMETHEUS', key: 'metrics.prometheus', type: 'boolean' },
];

const FLAG_KEYS: ReadonlyArray<[keyof ConfigFlags, string, 'string' | 'integer']> = [
  ['posture', 'posture', 'string'],
  ['region', 'region', 'string'],
  ['host', 'listen.host', 'string'],
  ['port', 'listen.port', 'integer'],
  ['dataDir', 'dataDir', 'string'],
  ['modelsDir', 'modelsDir', 'string'],
  ['manifest', 'manifest', 'string'],
];

const PATH_KEYS = [
  'tls.cert',
  'tls.key',
  'dataDir',
  'modelsDir',
  'manifest',
  'limits.redis.passwordFile',
  'postgres.passwordFile',
  'audit.journalDir',
];

/**
 * Where state lives when nothing says otherwise: systemd's StateDirectory, else the user's own data directory, root
 * included. A root shell trying the daemon out must not write a system directory; the appliance names
 * /var/lib/sovereign in its config file and its units, so it never reaches this default.
 */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  const fromSystemd = env.STATE_DIRECTORY?.split(':')[0];
  if (fromSystemd) return fromSystemd;
  // XDG says a relative XDG_DATA_HOME is invalid and must be ignored.
  const xdg = env.XDG_DATA_HOME && isAbsolute(env.XDG_DATA_HOME) ? env.XDG_DATA_HOME : undefined;
  return join(xdg ?? join(env.HOME || homedir(), '.local', 'share'), 'sovereign');
}

function defaults(env: NodeJS.ProcessEnv): Config {
  return {
    posture: 'device',
    region: 'local',
    listen: { port: 8443 },
    dataDir: defaultDataDir(env),
    store: 'lmdb',
    limits: {
      bodyBytes: 4 * 1024 * 1024,
      maxInFlight: 512,
      keyShare: 0.25,
      projectShare: 0.5,
      accountShare: 0.5,
      minShare: 4,
      defaultRpm: 600,
      defaultTpm: 600_000,
      defaultProjectRpm: 6000,
      defaultProjectTpm: 6_000_000,
      maxProjectsPerAccount: 10,
      maxKeysPerProject: 20,
      store: 'memory',
    },
    timeouts: { requestMs: 60_000, bodyIdleMs: 10_000, readerIdleMs: 30_000, keepAliveMs: 72_000, shutdownGraceMs: 30_000 },
    log: { level: 'info', requests: false },
    models: {
      load: 'boot',
      headroomBytes: 1024 * 1024 * 1024,
      parallel: 2,
      embeddingContexts: 2,
      queue: 32,
      gpu: 'auto',
      threads: 0,
      bundleKeys: [],
      rescanSeconds: 5,
    },
    scrub: { output: true },
    speech: { maxUploadBytes: 25 * 1024 * 1024, maxSeconds: 2 * 3600, ffmpeg: 'ffmpeg' },
    documents: {
      maxChunksPerDocument: 2000,
      maxDocumentsPerKnowledgeBase: 10_000,
      maxUploadBytes: 32 * 1024 * 1024,
      embeddingModel: null,
      pdf: { workers: 0, queue: 8, timeoutMs: 60_000, memoryMb: 512 },
    },
    images: { urlTtlSeconds: 3600 },
    responses: { ttlSeconds: 30 * 24 * 3600 },
    files: { maxBytes: 32 * 1024 * 1024, maxBytesPerProject: 1024 * 1024 * 1024, ttlSeconds: 30 * 24 * 3600 },
    batches: { maxLines: 50_000, parallel: 1, maxOpenPerProject: 8 },
    scheduling: { policy: 'fair', projectWeights: {} },
    plans: {},
    usage: { billingDays: 400 },
    metrics: { listen: { host: '127.0.0.1', port: 9464 } },
    alerts: { checkpointLagSeconds: 900, diskFreePercent: 10, diskFullHours: 72, egressHours: 24 },
    audit: {
      signer: 'tpm',
      tcti: 'device:/dev/tpmrm0',
      keyHandle: '0x81000101',
      primaryHandle: '0x81000100',
      attestationKeyHandle: '0x81010002',
      endorsementPrimaryHandle: '0x81010001',
      checkpointMs: 1000,
      heartbeatMs: 300_000,
    },
    upstreams: [],
  };
}

type Tree = Record<string, unknown>;

function isTree(value: unknown): value is Tree {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function setPath(tree: Tree, dotted: string, value: unknown): void {
  const parts = dotted.split('.');
  let node = tree;
  for (const part of parts.slice(0, -1)) {
    if (!isTree(node[part])) node[part] = {};
    node = node[part] as Tree;
  }
  node[parts[parts.length - 1]!] = value;
}

function getPath(tree: Tree, dotted: string): unknown {
  let node: unknown = tree;
  for (const part of dotted.split('.')) {
    if (!isTree(node)) return undefined;
    node = node[part];
  }
  return node;
}

function merge(base: Tree, over: Tree): Tree {
  const out: Tree = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = isTree(v) && isTree(out[k]) ? merge(out[k], v) : v;
  return out;
}

function convert(raw: string, type: 'string' | 'integer' | 'boolean', origin: string, problems: string[]): unknown {
  if (type === 'string') return raw;
  if (type === 'boolean') {
    if (raw === 'true' || raw === '1') return true;
    if (raw === 'false' || raw === '0') return false;
    problems.push(`${origin} must be true or false, got '${raw}'`);
    return undefined;
  }
  if (!/^\d+$/.test(raw)) {
    problems.push(`${origin} must be a whole number, got '${raw}'`);
    return undefined;
  }
  return Number(raw);
}

const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false });
const validate = ajv.compile(configSchema);

function keyOf(error: ErrorObject): string {
  const base = error.instancePath.split('/').filter(Boolean).join('.');
  const child =
    (error.params as { additionalProperty?: string; missingProperty?: string }).additionalProperty ??
    (error.params as { missingProperty?: string }).missingProperty;
  return child ? (base ? `${base}.${child}` : child) : base || '(root)';
}

function describe(error: ErrorObject): string {
  const key = keyOf(error);
  switch (error.keyword) {
    case 'additionalProperties':
      return `unknown key '${key}': remove it or check its spelling (see docs/config.md)`;
    case 'required':
      return `missing key '${key}'`;
    case 'enum':
      return `'${key}' must be one of ${(error.params as { allowedValues: unknown[] }).allowedValues.join(', ')}`;
    default:
      return `'${key}' ${error.message ?? 'is invalid'}`;
  }
}

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1|localhost)$/;

function postureRules(config: Config): string[] {
  const problems: string[] = [];
  const https = config.posture !== 'device';
  if (https && !config.listen.host) {
    problems.push(`'listen.host' is required for the ${config.posture} posture: set the address to serve on`);
  }
  if (https && !config.tls) {
    problems.push(`the ${config.posture} posture serves HTTPS only: set 'tls.cert' and 'tls.key' to the operator's certificate and key`);
  }
  if (!https && config.tls) problems.push(`the device posture serves plain HTTP on loopback: remove 'tls'`);
  if (!https && config.listen.host && !LOOPBACK.test(config.listen.host)) {
    problems.push(
      `the device posture listens on loopback only; 'listen.host' is '${config.listen.host}' (use the appliance posture to serve a network)`,
    );
  }
  problems.push(...metricsRules(config));
  if (config.limits.defaultPlan !== undefined && !Object.hasOwn(config.plans, config.limits.defaultPlan)) {
    const names = Object.keys(config.plans);
    problems.push(
      `'limits.defaultPlan' is '${config.limits.defaultPlan}', which 'plans' does not define` +
        (names.length ? ` (plans: ${names.join(', ')})` : ''),
    );
  }
  if (config.limits.store === 'redis' && !config.limits.redis) {
    problems.push(`'limits.store' is redis: set 'limits.redis.url' to the Redis server every replica shares`);
  }
  if (config.limits.store === 'redis' && !isMetered(config.posture)) {
    problems.push(`the ${config.posture} posture has no per-key limits: 'limits.store' redis applies to cloud and frontier only`);
  }
  if (config.store === 'postgres' && !config.postgres) {
    problems.push(`'store' is postgres: set 'postgres.url' to the database every replica shares`);
  }
  if (config.store === 'postgres' && !isMetered(config.posture)) {
    problems.push(`the ${config.posture} posture keeps its state on the machine: 'store' postgres applies to cloud and frontier only`);
  }
  // Frontier calls leave the sovereign boundary: what goes out and what comes back is always scrubbed there.
  if (config.posture === 'frontier' && !config.scrub.output) {
    problems.push(`'scrub.output' cannot be turned off on the frontier posture: answers from a frontier provider are always scrubbed`);
  }
  return problems.concat(upstreamRules(config));
}

/** Loopback literals, as the URL parser writes a host (IPv6 in brackets). */
/** Whether the Prometheus endpoint is served: as set, else on for cloud and frontier, off for the sealed postures. */
export function prometheusEnabled(config: Config): boolean {
  return config.metrics.prometheus ?? !isSealed(config.posture);
}

/**
 * /metrics answers without a key: it is served on an address of its own, an IP address of the machine (a name would
 * need a lookup), loopback or the internal network on the sealed postures, and never the API's own address and port.
 */
function metricsRules(config: Config): string[] {
  if (!prometheusEnabled(config)) return [];
  const { host, port } = config.metrics.listen;
  const problems: string[] = [];
  if (!isIP(host)) problems.push(`'metrics.listen.host' must be an IP address of this machine, not '${host}'`);
  else if (isSealed(config.posture) && !LOOPBACK.test(host) && addressKind(host) !== 'private') {
    problems.push(
      `'metrics.listen.host' is '${host}', but the ${config.posture} posture is sealed: serve /metrics on loopback or an internal-network address`,
    );
  }
  if (
    port !== 0 &&
    port === config.listen.port &&
    (host === listenHost(config) || host === '0.0.0.0' || listenHost(config) === '0.0.0.0')
  ) {
    problems.push(`'metrics.listen' is the API's own address: /metrics answers without a key, so it needs an address of its own`);
  }
  return problems;
}

const LOOPBACK_URL_HOST = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\]|localhost)$/;

function upstreamRules(config: Config): string[] {
  const problems: string[] = [];
  const names = new Set<string>();
  const modelIds = new Set<string>();
  config.upstreams.forEach((upstream, i) => {
    const key = `upstreams[${i}]`;
    if (names.has(upstream.name)) problems.push(`'${key}.name' '${upstream.name}' is used by another upstream: names must differ`);
    names.add(upstream.name);
    let url: URL | null = null;
    try {
      url = new URL(upstream.baseUrl);
    } catch {
      problems.push(`'${key}.baseUrl' is not a URL: '${upstream.baseUrl}'`);
    }
    if (url && (url.username || url.password)) {
      problems.push(`'${key}.baseUrl' holds credentials: put the key in a file named by '${key}.apiKeyFile' instead`);
    }
    if (url && (url.search || url.hash)) problems.push(`'${key}.baseUrl' must not have a query or a fragment`);
    // On the sealed postures the egress guard lets through loopback and the internal-network addresses listed here, as
    // IP addresses: a name would need a DNS lookup, which is itself egress.
    if (url && isSealed(config.posture) && !LOOPBACK_URL_HOST.test(url.hostname) && addressKind(url.hostname) !== 'private') {
      problems.push(
        `'${key}.baseUrl' points at '${url.hostname}', but the ${config.posture} posture is sealed: an upstream must be on loopback (127.0.0.1, ::1, localhost) or at an internal-network IP address (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7), written as an address, not a name`,
      );
    }
    if (upstream.frontier && config.posture !== 'frontier') {
      problems.push(
        `'${key}.frontier' is true, but a frontier provider may only be configured on the frontier posture (this one is ${config.posture})`,
      );
    }
    upstream.models.forEach((model, m) => {
      if (modelIds.has(model.id))
        problems.push(`'${key}.models[${m}].id' '${model.id}' is already routed by another entry: ids must differ`);
      modelIds.add(model.id);
    });
  });
  return problems;
}

/**
 * Builds the effective configuration: defaults, then the file, then the environment, then flags. Relative paths in
 * the file are taken from the file's directory; relative paths from flags or the environment from the working
 * directory.
 */
export function loadConfig(flags: ConfigFlags = {}, env: NodeJS.ProcessEnv = process.env): LoadedConfig {
  const problems: string[] = [];
  const file = flags.config ?? env.SOVEREIGN_CONFIG;
  let fromFile: Tree = {};
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new ConfigError([`cannot read the config file: ${(err as Error).message}`], file);
    }
    try {
      const parsed: unknown = JSON.parse(text);
      if (!isTree(parsed)) throw new Error('the top level must be a JSON object');
      fromFile = parsed;
    } catch (err) {
      throw new ConfigError([`not valid JSON: ${(err as Error).message}`], file);
    }
    const base = dirname(resolve(file));
    for (const key of PATH_KEYS) {
      const value = getPath(fromFile, key);
      if (typeof value === 'string' && value && !isAbsolute(value)) setPath(fromFile, key, resolve(base, value));
    }
    const models = fromFile.models;
    if (isTree(models) && Array.isArray(models.bundleKeys)) {
      models.bundleKeys = models.bundleKeys.map((k: unknown) => (typeof k === 'string' && k && !isAbsolute(k) ? resolve(base, k) : k));
    }
    if (Array.isArray(fromFile.upstreams)) {
      for (const upstream of fromFile.upstreams as unknown[]) {
        if (isTree(upstream) && typeof upstream.apiKeyFile === 'string' && upstream.apiKeyFile && !isAbsolute(upstream.apiKeyFile)) {
          upstream.apiKeyFile = resolve(base, upstream.apiKeyFile);
        }
      }
    }
  }

  const overrides: Tree = {};
  const override = (key: string, raw: string, type: 'string' | 'integer' | 'boolean', origin: string) => {
    if (PATH_KEYS.includes(key)) setPath(overrides, key, resolve(raw));
    else {
      const value = convert(raw, type, origin, problems);
      if (value !== undefined) setPath(overrides, key, value);
    }
  };
  for (const { env: name, key, type } of ENV_OVERRIDES) {
    const raw = env[name];
    if (raw !== undefined && raw !== '') override(key, raw, type, `environment variable ${name}`);
  }
  for (const [flag, key, type] of FLAG_KEYS) {
    const raw = flags[flag];
    if (raw !== undefined) override(key, raw, type, `--${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`);
  }
  const source = file ?? 'defaults, environment and flags';
  if (problems.length) throw new ConfigError(problems, source);

  const merged = merge(merge(defaults(env) as unknown as Tree, fromFile), overrides);
  delete merged.$schema;
  if (!validate(merged)) throw new ConfigError((validate.errors ?? []).map(describe), source);
  const config = merged as unknown as Config;
  const rules = postureRules(config);
  if (rules.length) throw new ConfigError(rules, source);
  return { config, file };
}

/** The address the server binds for a posture. */
export function listenHost(config: Config): string {
  return config.listen.host ?? '127.0.0.1';
}

export function modelsDir(config: Config): string {
  return config.modelsDir ?? join(config.dataDir, 'models');
}

export function manifestPath(config: Config): string {
  return config.manifest ?? join(PACKAGE_ROOT, 'models-manifest.json');
}

export function isSovereign(posture: Posture): boolean {
  return posture !== 'frontier';
}

export function isSealed(posture: Posture): boolean {
  return posture === 'device' || posture === 'appliance';
}

/**
 * The llama.cpp sequences a chat model's context holds: `models.parallel`, and under the fair policy one more, kept for
 * a project that holds none (engines/slots.ts), so that its call never waits behind another project's generations.
 */
export function chatSequences(config: Config): number {
  return config.models.parallel + (config.scheduling.policy === 'fair' ? 1 : 0);
}

export function isMetered(posture: Posture): boolean {
  return posture === 'cloud' || posture === 'frontier';
}

export function usesTls(posture: Posture): boolean {
  return posture !== 'device';
}

export { POSTURES };
