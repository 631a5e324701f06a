export {
  chatSequences,
  ConfigError,
  ENV_OVERRIDES,
  defaultDataDir,
  isMetered,
  isSealed,
  isSovereign,
  listenHost,
  loadConfig,
  manifestPath,
  modelsDir,
  prometheusEnabled,
  usesTls,
  type ConfigFlags,
  type LoadedConfig,
} from './load.js';
export { configSchema, POSTURES, type Config, type LogLevel, type Posture, type UpstreamConfig } from './schema.js';
