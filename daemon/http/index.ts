export { buildApp, type AppDeps, type AppOptions } from './server.js';
export type { DaemonState, PipelineDeps } from './pipeline.js';
export { stopSchemaChecks } from './answer-schema.js';
export { inProcessCaller } from './in-process.js';
