// Demo models: tiny models with random weights that `sovereign models demo` writes, so that a newcomer can try the API
// (chat, embeddings, speech to text) on a machine without model files. Their answers mean nothing, so they must never
// pass for a model anyone relies on: a manifest entry marked `demo` is served on the development posture only, and
// wherever it is named (owned_by in /v1/models and health, `sovereign models list`) it says what it is.
import type { Posture } from '../config/index.js';
import type { ManifestEntry } from './manifest.js';

/** What a demo model is, in the words clients and operators see next to it. */
export const DEMO_LABEL = 'random weights, for trying the API';

/** The only posture that serves demo models: a developer's machine. Appliances, clouds and frontier gateways never do. */
export const DEMO_POSTURE: Posture = 'device';

/** Why `entry` is not served on `posture` because it is a demo model, or null when that is no reason. */
export function demoRefusal(entry: Pick<ManifestEntry, 'demo'>, posture: Posture): string | null {
  if (!entry.demo || posture === DEMO_POSTURE) return null;
  return (
    `a random-weight demo model is never served on the ${posture} posture: it is for trying the API on a development ` +
    `machine (posture ${DEMO_POSTURE}); import a real model for this device (docs/models.md)`
  );
}

/** The entry's owner as shown to clients: a demo model always carries its label, whatever its manifest says. */
export function ownedByOf(entry: Pick<ManifestEntry, 'demo' | 'ownedBy'>): string {
  if (!entry.demo || entry.ownedBy.includes(DEMO_LABEL)) return entry.ownedBy;
  return `${entry.ownedBy} (${DEMO_LABEL})`;
}
