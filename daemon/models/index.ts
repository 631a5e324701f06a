export { ModelCatalog, ownedByShown, type Readiness, type ServedModel } from './catalog.js';
export { assessModels, type Availability, type ModelStatus } from './inventory.js';
export { DEMO_LABEL, DEMO_POSTURE, demoRefusal, ownedByOf } from './demo.js';
export {
  CAPABILITIES,
  checkManifest,
  loadManifest,
  ManifestError,
  servingContextOf,
  type Capability,
  type EngineName,
  type Manifest,
  type ManifestEntry,
  type GgufFacts,
  type GgmlFacts,
} from './manifest.js';
export { fileIdentity, hashFile, ModelVerifier, openModelFile, type Pin } from './verify.js';
export { headerMismatch, readGgmlFacts, readGgufFacts } from './header.js';
export type { ModelEvent, ModelEventListener } from './events.js';
export { importModel, ImportError, type ImportResult } from './import.js';
export {
  importBundle,
  readBundle,
  writeBundle,
  createBundleKey,
  BUNDLE_FILE,
  BUNDLE_SIGNATURE_FILE,
  type BundleImport,
  type WrittenBundle,
} from './bundle.js';
